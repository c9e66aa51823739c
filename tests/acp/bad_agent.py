#!/usr/bin/env python3
"""A broken ACP agent the peer scripts must fail: it answers initialize, session/new and
session/prompt (end_turn), but each prompt's second session/update carries a content block of an
unknown type, which the SDKs' schemas reject. Used by examples/tests/acp_peers.rs to show the
peers catch a malformed update; ignores its arguments (the peers pass ``--db PATH``)."""

import json
import sys


def send(message) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    if "id" not in message or "method" not in message:
        continue
    method, id_ = message["method"], message["id"]
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": id_, "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": True, "promptCapabilities": {"image": True, "audio": True, "embeddedContext": True}}}})
    elif method == "session/new":
        send({"jsonrpc": "2.0", "id": id_, "result": {"sessionId": "s1"}})
    elif method == "session/prompt":
        for content in ({"type": "text", "text": "hi"}, {"type": "no-such-block"}):
            update = {"sessionUpdate": "agent_message_chunk", "content": content}
            send({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1", "update": update}})
        send({"jsonrpc": "2.0", "id": id_, "result": {"stopReason": "end_turn"}})
    else:
        send({"jsonrpc": "2.0", "id": id_, "error": {"code": -32601, "message": "Method not found"}})
