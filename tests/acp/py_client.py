"""The official ACP Python SDK (agent-client-protocol) as the client of the acp-agent example.

Run ``python py_client.py <agent-binary> <scratch-dir>``. The SDK parses every message the agent
sends with its pydantic models; the checks below look at what the agent answered. Prints
``ok - ...`` / ``not ok - ...`` lines and a last line ``N passed, M failed``.
"""

import asyncio
import logging
import os
import sys
from typing import Any

from acp import PROTOCOL_VERSION, RequestError, text_block
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    FileSystemCapabilities,
    Implementation,
    RequestPermissionResponse,
)
from acp.stdio import spawn_agent_process

CHECK_TIMEOUT_S = float(os.environ.get("BIDI_ACP_CHECK_TIMEOUT_MS", "60000")) / 1000

passed = 0
failed = 0
logged: list[str] = []


class Recorder(logging.Handler):
    """Records what the SDK logs as an error (a message it rejected, a handler that threw)."""

    def emit(self, record: logging.LogRecord) -> None:
        logged.append(record.getMessage())


logging.getLogger().addHandler(Recorder(level=logging.ERROR))


def describe(error: BaseException) -> str:
    text = str(error) or type(error).__name__
    return " | ".join(line.strip() for line in text.splitlines() if line.strip())


async def check(name, fn):
    """Runs one check (a coroutine function), prints its result, returns its value or None."""
    global passed, failed
    try:
        value = await asyncio.wait_for(fn(), CHECK_TIMEOUT_S)
    except Exception as error:  # noqa: BLE001 - every failure is reported
        failed += 1
        print(f"not ok - {name}: {type(error).__name__}: {describe(error)}", flush=True)
        return None
    passed += 1
    print(f"ok - {name}", flush=True)
    return value


class Peer:
    """The client side: records the session/update notifications, allows every permission."""

    def __init__(self) -> None:
        self.updates: list[tuple[str, Any]] = []
        self.arrived = asyncio.Event()

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        return RequestPermissionResponse(
            outcome=AllowedOutcome(outcome="selected", option_id=options[0].option_id)
        )

    async def session_update(self, session_id, update, **kwargs):
        self.updates.append((session_id, update))
        self.arrived.set()

    async def write_text_file(self, *args, **kwargs):
        raise RequestError.method_not_found("fs/write_text_file")

    async def read_text_file(self, *args, **kwargs):
        raise RequestError.method_not_found("fs/read_text_file")

    async def ext_method(self, method, params):
        raise RequestError.method_not_found(method)

    async def ext_notification(self, method, params):
        return None

    def on_connect(self, conn) -> None:
        return None


def kinds(updates) -> list[str]:
    return [update.session_update for _, update in updates]


async def main(agent: str, scratch: str) -> None:
    peer = Peer()
    db = os.path.join(scratch, "py-sessions.sqlite3")
    sent = []

    def observe(event) -> None:
        if event.direction.value == "incoming" and event.message.get("method") == "session/update":
            sent.append(event.message)

    async with spawn_agent_process(peer, agent, "--db", db, observers=[observe]) as (
        conn,
        _process,
    ):

        async def initialize():
            response = await conn.initialize(
                protocol_version=PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=False, write_text_file=False),
                    terminal=False,
                ),
                client_info=Implementation(name="bidi-py-peer", version="0.0.0"),
            )
            assert response.protocol_version == 1, f"protocol_version {response.protocol_version}"
            return response

        if await check("initialize: protocol version 1", initialize) is None:
            return

        async def new_session():
            response = await conn.new_session(cwd=scratch, mcp_servers=[])
            assert response.session_id, f"no session id: {response}"
            return response.session_id

        session_id = await check("new_session: a session id", new_session)
        if session_id is None:
            return

        async def prompt(text: str):
            return await conn.prompt(session_id=session_id, prompt=[text_block(text)])

        async def first_prompt():
            before = len(peer.updates)
            response = await prompt("hello from the Python SDK")
            assert response.stop_reason == "end_turn", f"stop_reason {response.stop_reason!r}"
            own = peer.updates[before:]
            assert "agent_message_chunk" in kinds(own), f"no agent_message_chunk in {kinds(own)}"
            assert all(sid == session_id for sid, _ in own), "an update of another session"

        await check("prompt: agent_message_chunk updates, then end_turn", first_prompt)

        stops: list[str] = []

        async def cancelled_prompt():
            before = len(peer.updates)
            peer.arrived.clear()
            turn = asyncio.create_task(prompt("answer slowly, please"))
            # The demo model thinks three seconds before a prompt saying "slowly" answers: cancel
            # at its first update, or after half a second if it sends none before it thinks.
            try:
                await asyncio.wait_for(peer.arrived.wait(), 0.5)
            except asyncio.TimeoutError:
                pass
            assert not turn.done(), f"the slow turn ended before the cancel: {turn.result()}"
            await conn.cancel(session_id=session_id)
            response = await turn
            stops.append(response.stop_reason)
            assert response.stop_reason == "cancelled", f"stop_reason {response.stop_reason!r}"
            return kinds(peer.updates[before:])

        seen = await check("cancel: a slow prompt cancelled mid-turn ends cancelled", cancelled_prompt)
        if seen is not None:
            print(f"# updates of the cancelled turn: {seen}", flush=True)

        async def after_cancel():
            # A second cancel, with no turn running, changes nothing.
            await conn.cancel(session_id=session_id)
            before = len(peer.updates)
            response = await prompt("and now a quick one")
            stops.append(response.stop_reason)
            assert response.stop_reason == "end_turn", f"stop_reason {response.stop_reason!r}"
            assert "agent_message_chunk" in kinds(peer.updates[before:]), "no agent_message_chunk"
            assert stops.count("cancelled") == 1, f"stop reasons {stops}"

        await check("the next prompt ends end_turn; the turn was cancelled exactly once", after_cancel)

        async def unknown_session():
            try:
                await conn.prompt(session_id="no-such-session", prompt=[text_block("hi")])
            except RequestError as error:
                return error.code
            raise AssertionError("the prompt of an unknown session succeeded")

        await check("prompt of an unknown session is a JSON-RPC error", unknown_session)

        async def all_parsed():
            assert sent, "no session/update sent"
            assert len(peer.updates) == len(sent), f"{len(peer.updates)} of {len(sent)} reached the client"
            assert not logged, f"the SDK logged: {' | '.join(logged)}"

        await check("every session/update the agent sent passed the SDK's models and reached the client", all_parsed)


def run() -> int:
    global failed
    if len(sys.argv) != 3:
        print(f"not ok - usage: python {sys.argv[0]} <agent-binary> <scratch-dir>")
        print("0 passed, 1 failed")
        return 2
    try:
        asyncio.run(main(sys.argv[1], sys.argv[2]))
    except Exception as error:  # noqa: BLE001
        failed += 1
        print(f"not ok - the script threw: {type(error).__name__}: {describe(error)}")
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(run())
