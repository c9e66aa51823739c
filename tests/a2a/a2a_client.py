"""The official A2A Python SDK's client (`a2a-sdk` 1.3.0, A2A 1.0 over JSON-RPC) driving bidi
`LlmAgent`s over bidi-http's A2A wire. Usage: python a2a_client.py <baseUrl>

The server is `tests/tests/a2a_clients.rs`'s: `helper` (scripted answers), `tools` (a remote
tool `lookup` and a tool `wipe` that needs approval), `slow` (a model that answers only when
`POST /finish` says so), `memo` (client-managed). Each check prints one JSON line,
`{"check": name, ...what it saw}` (or `{"check": name, "error": why}`), and the Rust test
asserts what it saw. The last line is `N passed, M failed`: M checks threw.
"""

import asyncio
import json
import sys
import traceback

import httpx
from google.protobuf import json_format

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    SendMessageRequest,
    TaskState,
)

passed = 0
failed = 0


async def check(name, fn):
    """Runs `fn`, printing what it returns (or why it threw) as one JSON line."""
    global passed, failed
    try:
        seen = await fn()
        print(json.dumps({"check": name, **seen}), flush=True)
        passed += 1
    except Exception:  # noqa: BLE001 - every failure is reported, none stops the run
        print(json.dumps({"check": name, "error": traceback.format_exc()}), flush=True)
        failed += 1


counter = 0


def message(parts, task_id=None, context_id=None):
    """A user message: text parts for strings, data parts for dicts."""
    global counter
    counter += 1
    json_parts = [{"text": p} if isinstance(p, str) else {"data": p} for p in parts]
    value = {"messageId": f"py-{counter}", "role": "ROLE_USER", "parts": json_parts}
    if task_id:
        value["taskId"] = task_id
    if context_id:
        value["contextId"] = context_id
    return json_format.ParseDict(value, Message())


def request(msg):
    return SendMessageRequest(message=msg)


def state(task):
    return TaskState.Name(task.status.state)


def text(parts):
    return "".join(p.text for p in parts if p.HasField("text"))


def data(parts):
    for p in parts:
        if p.HasField("data"):
            return json_format.MessageToDict(p.data)
    return None


def seen(task):
    """A task as plain JSON: its ids, state, status text and data, answer and history."""
    role = lambda m: "user" if m.role == 1 else "agent"  # noqa: E731
    return {
        "id": task.id,
        "contextId": task.context_id,
        "state": state(task),
        "statusText": text(task.status.message.parts),
        "statusData": data(task.status.message.parts),
        "answer": "|".join(text(a.parts) for a in task.artifacts),
        "history": [f"{role(m)}:{text(m.parts)}" for m in task.history],
    }


def events(all_events):
    """Each event of a stream as one short word, and the answer text the stream carried."""
    kinds = []
    answer = ""
    for event in all_events:
        if event.HasField("task"):
            kinds.append(f"task:{state(event.task)}")
        elif event.HasField("status_update"):
            kinds.append(f"status:{TaskState.Name(event.status_update.status.state)}")
        elif event.HasField("artifact_update"):
            update = event.artifact_update
            how = "append" if update.append else "new"
            last = ":last" if update.last_chunk else ""
            kinds.append(f"artifact:{update.artifact.artifact_id}:{how}{last}")
            answer += text(update.artifact.parts)
    return {"kinds": kinds, "answer": answer}


async def main(base):
    blocking = ClientFactory(ClientConfig(streaming=False))
    streaming = ClientFactory(ClientConfig(streaming=True))
    helper = await blocking.create_from_url(f"{base}/agent/helper/a2a")
    helper_streams = await streaming.create_from_url(f"{base}/agent/helper/a2a")
    tools = await blocking.create_from_url(f"{base}/agent/tools/a2a")
    slow = await streaming.create_from_url(f"{base}/agent/slow/a2a")
    memo = await blocking.create_from_url(f"{base}/agent/memo/a2a")

    async def send(client, msg):
        async for event in client.send_message(request(msg)):
            return event.task
        raise AssertionError("no answer")

    async def stream(client, msg):
        return [event async for event in client.send_message(request(msg))]

    ids = {}

    async def card():
        async with httpx.AsyncClient() as http:
            card = await A2ACardResolver(http, f"{base}/agent/helper/a2a").get_agent_card()
        interface = card.supported_interfaces[0]
        return {
            "name": card.name,
            "streaming": card.capabilities.streaming,
            "url": interface.url,
            "binding": interface.protocol_binding,
            "version": interface.protocol_version,
        }

    async def first():
        task = await send(helper, message(["hello"]))
        ids["first"] = task
        return seen(task)

    async def again():
        task = await send(helper, message(["again"], context_id=ids["first"].context_id))
        return {**seen(task), "sameContext": task.context_id == ids["first"].context_id}

    async def streamed():
        all_events = await stream(helper_streams, message(["stream please"]))
        ids["streamed"] = all_events[0].task.id
        return events(all_events)

    async def get():
        task = await helper.get_task(GetTaskRequest(id=ids["streamed"], history_length=1))
        return seen(task)

    async def remote():
        asked = await send(tools, message(["find the file"]))
        call = data(asked.status.message.parts)["awaitingToolExecution"][0]
        results = {"results": [{"toolCallId": call["id"], "output": {"path": "/tmp/file"}}]}
        answered = await send(tools, message([results], asked.id, asked.context_id))
        return {"asked": seen(asked), "answered": seen(answered)}

    async def approval():
        asked = await send(tools, message(["wipe the disk"]))
        call = data(asked.status.message.parts)["awaitingApproval"][0]
        approvals = {"approvals": [{"toolCallId": call["id"], "approved": True}]}
        answered = await send(tools, message([approvals], asked.id, asked.context_id))
        return {"asked": seen(asked), "answered": seen(answered)}

    async def cancel_and_errors():
        all_events = []
        canceled = None
        async for event in slow.send_message(request(message(["wait"]))):
            all_events.append(event)
            if len(all_events) == 2:
                canceled = await slow.cancel_task(CancelTaskRequest(id=event.status_update.task_id))

        async def refused(call):
            try:
                await call
            except Exception as error:  # noqa: BLE001 - its class is what is checked
                return type(error).__name__
            return "not refused"

        return {
            "canceled": state(canceled),
            "last": events(all_events)["kinds"][-1],
            "unknownTask": await refused(helper.get_task(GetTaskRequest(id="no-such-task"))),
            "finishedTask": await refused(helper.cancel_task(CancelTaskRequest(id=ids["first"].id))),
            "clientManaged": await refused(memo.get_task(GetTaskRequest(id="x"))),
        }

    await check("card", card)
    await check("send", first)
    await check("send in the same context", again)
    await check("stream", streamed)
    await check("get", get)
    await check("input required: a remote tool", remote)
    await check("input required: an approval", approval)
    await check("cancel a running task and errors", cancel_and_errors)
    for client in (helper, helper_streams, tools, slow, memo):
        await client.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python a2a_client.py <baseUrl>")
        print("0 passed, 1 failed")
        sys.exit(2)
    asyncio.run(main(sys.argv[1].rstrip("/")))
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
