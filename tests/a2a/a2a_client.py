"""The official A2A Python SDK's client (`a2a-sdk` 1.3.0, A2A 1.0 over JSON-RPC) driving bidi
`LlmAgent`s over bidi-http's A2A wire. Usage: python a2a_client.py <baseUrl>

The server is `tests/tests/a2a_clients.rs`'s: `helper` (scripted answers), `tools` (a remote
tool `lookup` and a tool `wipe` that needs approval), `ask` (the same tools, a task that asks
for input again and again), `slow` (a model that answers only when `POST /finish` says so, or
calls `lookup` when `POST /ask` does), `memo` (client-managed), `hooked` (answers once, its
task's state changes pushed to the webhook receivers at <hookUrl>, `hook/py`; usage: python
a2a_client.py <baseUrl> <hookUrl> [JSONRPC|HTTP+JSON]: the clients speak the binding named,
JSON-RPC by default). Each check prints one JSON line,
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
    DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTasksRequest,
    Message,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskPushNotificationConfig,
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


async def main(base, hooks, binding):
    bindings = [binding]
    blocking = ClientFactory(ClientConfig(streaming=False, supported_protocol_bindings=bindings))
    streaming = ClientFactory(ClientConfig(streaming=True, supported_protocol_bindings=bindings))
    helper = await blocking.create_from_url(f"{base}/agent/helper/a2a")
    helper_streams = await streaming.create_from_url(f"{base}/agent/helper/a2a")
    tools = await blocking.create_from_url(f"{base}/agent/tools/a2a")
    slow = await streaming.create_from_url(f"{base}/agent/slow/a2a")
    memo = await blocking.create_from_url(f"{base}/agent/memo/a2a")
    hooked = await blocking.create_from_url(f"{base}/agent/hooked/a2a")
    ask = await blocking.create_from_url(f"{base}/agent/ask/a2a")
    ask_streams = await streaming.create_from_url(f"{base}/agent/ask/a2a")

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
        return {"asked": seen(asked), "answered": seen(answered), "sameTask": answered.id == asked.id}

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

    def task_of(event):
        for field in ("task", "status_update", "artifact_update"):
            if event.HasField(field):
                value = getattr(event, field)
                return value.id if field == "task" else value.task_id
        return None

    async def rounds():
        asked = await send(ask, message(["find the file"]))
        call = data(asked.status.message.parts)["awaitingToolExecution"][0]
        results = {"results": [{"toolCallId": call["id"], "output": "found"}]}
        again = await send(ask, message([results], asked.id, asked.context_id))
        waiting = await ask.get_task(GetTaskRequest(id=asked.id))
        approval = data(again.status.message.parts)["awaitingApproval"][0]
        approvals = {"approvals": [{"toolCallId": approval["id"], "approved": True}]}
        done = await send(ask, message([approvals], asked.id))
        got = await ask.get_task(GetTaskRequest(id=asked.id))
        return {
            "asked": seen(asked),
            "again": seen(again),
            "waiting": seen(waiting),
            "done": seen(done),
            "got": seen(got),
            "sameTask": [t.id == asked.id for t in (again, waiting, done, got)],
        }

    async def text_answer():
        asked = await send(ask, message(["find it again"]))
        all_events = await stream(
            ask_streams, message(["never mind, say hi"], asked.id, asked.context_id)
        )
        seen_events = events(all_events)
        got = await ask.get_task(GetTaskRequest(id=asked.id))
        history = [json_format.MessageToDict(m) for m in got.history]
        return {
            "asked": state(asked),
            "first": seen_events["kinds"][0],
            "last": seen_events["kinds"][-1],
            "answer": seen_events["answer"],
            "sameTask": all(task_of(e) == asked.id for e in all_events),
            "got": {**seen(got), "history": json.dumps(history)},
        }

    async def refusal(call):
        try:
            await call
        except Exception as error:  # noqa: BLE001 - its class is what is checked
            # The SDK raises the class of the A2A error code it read.
            codes = {
                "TaskNotFoundError": -32001,
                "TaskNotCancelableError": -32002,
                "UnsupportedOperationError": -32004,
            }
            name = type(error).__name__
            return {"refused": True, "name": name, "code": codes.get(name)}
        return {"refused": False}

    async def first_event(iterator):
        async for event in iterator:
            return event
        return None

    async def cancel_waiting():
        asked = await send(ask, message(["find a third time"]))
        canceled = await ask.cancel_task(CancelTaskRequest(id=asked.id))
        got = await ask.get_task(GetTaskRequest(id=asked.id))
        following = await send(ask, message(["something else"], context_id=asked.context_id))
        return {
            "canceled": {**seen(canceled), "sameTask": canceled.id == asked.id},
            "got": state(got),
            "message": await refusal(send(ask, message(["go on"], asked.id))),
            "again": await refusal(ask.cancel_task(CancelTaskRequest(id=asked.id))),
            "subscribe": await refusal(
                first_event(ask_streams.subscribe(SubscribeToTaskRequest(id=asked.id)))
            ),
            "next": {
                **seen(following),
                "newTask": following.id != asked.id,
                "sameContext": following.context_id == asked.context_id,
            },
        }

    async def slow_asks(text):
        """Streams `text` to `slow`, which calls `lookup` once asked to: the waiting task."""
        all_events = []
        async with httpx.AsyncClient() as http:
            async for event in slow.send_message(request(message([text]))):
                all_events.append(event)
                if len(all_events) == 1:
                    await http.post(f"{base}/ask")
        task = all_events[0].task
        last = all_events[-1].status_update.status.message.parts
        call = data(last)["awaitingToolExecution"][0]
        results = {"results": [{"toolCallId": call["id"], "output": "found"}]}
        return task, events(all_events)["kinds"], message([results], task.id, task.context_id)

    async def subscribe_continuation():
        task, kinds, reply = await slow_asks("look")
        continuation = slow.send_message(request(reply)).__aiter__()
        await continuation.__anext__()
        all_events = []
        async with httpx.AsyncClient() as http:
            async for event in slow.subscribe(SubscribeToTaskRequest(id=task.id)):
                all_events.append(event)
                if len(all_events) == 1:
                    await http.post(f"{base}/finish")
        async for _ in continuation:
            pass
        followed = events(all_events)
        got = await slow.get_task(GetTaskRequest(id=task.id))
        return {
            "asked": kinds[-1],
            "first": "task" if all_events[0].HasField("task") else "other",
            "sameTask": all(task_of(e) == task.id for e in all_events),
            "answer": followed["answer"],
            "last": followed["kinds"][-1],
            "got": state(got),
        }

    async def cancel_continuation():
        task, _, reply = await slow_asks("look again")
        all_events = []
        canceled = None
        async for event in slow.send_message(request(reply)):
            all_events.append(event)
            if len(all_events) == 2:
                canceled = await slow.cancel_task(CancelTaskRequest(id=task.id))
        got = await slow.get_task(GetTaskRequest(id=task.id))
        return {
            "canceled": state(canceled),
            "sameTask": canceled.id == task.id,
            "last": events(all_events)["kinds"][-1],
            "got": state(got),
        }

    async def listed():
        everything = await helper.list_tasks(ListTasksRequest())
        page_one = await helper.list_tasks(ListTasksRequest(page_size=1))
        page_two = await helper.list_tasks(
            ListTasksRequest(page_size=1, page_token=page_one.next_page_token)
        )
        context = await helper.list_tasks(
            ListTasksRequest(context_id=ids["first"].context_id, include_artifacts=True)
        )
        working = await helper.list_tasks(ListTasksRequest(status=TaskState.TASK_STATE_WORKING))
        order = [task.id for task in everything.tasks]
        stamps = [task.status.timestamp.ToMilliseconds() for task in everything.tasks]
        try:
            await memo.list_tasks(ListTasksRequest())
            client_managed = "not refused"
        except Exception as error:  # noqa: BLE001 - its class is what is checked
            client_managed = type(error).__name__
        return {
            "total": everything.total_size,
            "ids": len(set(order)),
            "lastPage": everything.next_page_token,
            "newestFirst": stamps == sorted(stamps, reverse=True),
            "noArtifacts": all(len(task.artifacts) == 0 for task in everything.tasks),
            "pages": [task.id for task in [*page_one.tasks, *page_two.tasks]] == order[:2],
            "pageSize": page_one.page_size,
            "contextAnswers": sorted("|".join(text(a.parts) for a in task.artifacts)
                                     for task in context.tasks),
            "working": len(working.tasks),
            "clientManaged": client_managed,
        }

    async def pushed():
        inline = json_format.ParseDict(
            {
                "id": "py-inline",
                "url": f"{hooks}/hook/py",
                "token": "py-token",
                "authentication": {"scheme": "Bearer", "credentials": "py-secret"},
            },
            TaskPushNotificationConfig(),
        )
        configuration = SendMessageConfiguration(task_push_notification_config=inline)
        sent = SendMessageRequest(message=message(["note this"]), configuration=configuration)
        task = None
        async for event in hooked.send_message(sent):
            task = event.task
            break
        made = await hooked.create_task_push_notification_config(
            TaskPushNotificationConfig(task_id=task.id, id="py-made", url=f"{hooks}/hook/py-made")
        )
        listed = await hooked.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        got = await hooked.get_task_push_notification_config(
            GetTaskPushNotificationConfigRequest(task_id=task.id, id="py-made")
        )
        await hooked.delete_task_push_notification_config(
            DeleteTaskPushNotificationConfigRequest(task_id=task.id, id="py-made")
        )
        after = await hooked.list_task_push_notification_configs(
            ListTaskPushNotificationConfigsRequest(task_id=task.id)
        )
        return {
            "id": task.id,
            "state": state(task),
            "made": made.id,
            "listed": sorted(config.id for config in listed.configs),
            "got": got.url == f"{hooks}/hook/py-made",
            "after": [config.id for config in after.configs],
        }

    await check("card", card)
    await check("send", first)
    await check("send in the same context", again)
    await check("stream", streamed)
    await check("get", get)
    await check("input required: a remote tool", remote)
    await check("input required: an approval", approval)
    await check("cancel a running task and errors", cancel_and_errors)
    await check("a task lives across its inputs", rounds)
    await check("a task answered with text", text_answer)
    await check("cancel a task that waits for input", cancel_waiting)
    await check("subscribe to a continuation", subscribe_continuation)
    await check("cancel a running continuation", cancel_continuation)
    await check("list tasks", listed)
    await check("push notifications", pushed)
    for client in (helper, helper_streams, tools, slow, memo, hooked, ask, ask_streams):
        await client.close()


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        print("usage: python a2a_client.py <baseUrl> <hookUrl> [JSONRPC|HTTP+JSON]")
        print("0 passed, 1 failed")
        sys.exit(2)
    binding = sys.argv[3] if len(sys.argv) == 4 else "JSONRPC"
    asyncio.run(main(sys.argv[1].rstrip("/"), sys.argv[2].rstrip("/"), binding))
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)
