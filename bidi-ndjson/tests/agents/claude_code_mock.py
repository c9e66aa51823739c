#!/usr/bin/env python3
"""Behaves as Concerto's Claude Code middleware (`claude_code_host.py` in
Digine-Labs/concerto-lang, agents/claude_code) run with `--mode stream --interactive --mock`,
written anew from its behaviour.

Each prompt line (plain text, or `{"prompt": .., "context": ..}`) is a session: progress, a
question with an id (its answer is guidance), an approval with an id when the prompt looks
risky (a no ends the session with an error), then the mock run's partials and a result with
`session`, `text`, `elapsed_ms` and `command`. An answer is a reply's `value` (or `response`),
or a plain line; none within the response timeout (the first argument, 30 s by default) is
the default: "" for the question, "no" for the approval. A `response` line that arrives where
a prompt is expected is ignored. The end of the input ends the agent.
"""

import json
import queue
import sys
import threading
import time

RESPONSE_TIMEOUT = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
RISKY = ("rm -rf", "drop table", "delete", "destroy", "production", "migrate", "rollback",
         "truncate", "sudo")
YES = {"y", "yes", "approve", "approved", "true", "1", "ok", "proceed"}


def read_lines(lines):
    for line in sys.stdin:
        lines.put(line)
    lines.put(None)


def emit(kind, **fields):
    sys.stdout.write(json.dumps({"type": kind, **fields}, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def as_json(text):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def answer(lines, default):
    try:
        line = lines.get(timeout=RESPONSE_TIMEOUT)
    except queue.Empty:
        return default
    if line is None:
        return default
    reply = as_json(line.strip())
    if isinstance(reply, dict):
        value = reply.get("value")
        if value is None:
            value = reply.get("response")
        if value is None:
            return default
        return value.strip() if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return line.strip() or default


def session(lines, n, prompt, context):
    started = time.time()
    emit("progress", session=n, stage="received_prompt", message="Prompt received")
    emit("question", id=f"session-{n}-question",
         question="Any extra implementation guidance before I run Claude Code?",
         context="Reply with one short instruction, or leave empty.",
         options=["Proceed as-is", "Prioritize safety", "Prioritize speed"])
    guidance = answer(lines, "")
    if guidance:
        emit("progress", session=n, stage="supervisor_guidance", message="Applied supervisor guidance")
    if any(word in prompt.lower() for word in RISKY):
        emit("approval", id=f"session-{n}-approval",
             description=f"High-risk task detected: {prompt[:160]}", risk_level="high")
        if answer(lines, "no").strip().lower() not in YES:
            emit("error", session=n, message="Task rejected by supervisor approval handler")
            return
    emit("progress", session=n, stage="invoke_claude", message="Invoking Claude Code CLI")
    chunks = [f"Planning implementation for task: {prompt[:100]}"]
    if guidance:
        chunks.append(f"Following guidance: {guidance}")
    if context is not None:
        chunks.append(f"With context: {json.dumps(context, sort_keys=True)}")
    chunks.append("Mock Claude Code run completed successfully.")
    for chunk in chunks:
        emit("partial", session=n, chunk=chunk)
    emit("result", session=n, text="\n".join(chunks),
         elapsed_ms=int((time.time() - started) * 1000), command="claude")


def main():
    lines = queue.Queue()
    threading.Thread(target=read_lines, args=(lines,), daemon=True).start()
    n = 0
    while (line := lines.get()) is not None:
        line = line.strip()
        if not line:
            continue
        parsed = as_json(line)
        if isinstance(parsed, dict) and parsed.get("type") == "response":
            continue
        if isinstance(parsed, dict) and "prompt" in parsed:
            prompt = parsed["prompt"]
            if not isinstance(prompt, str):
                prompt = json.dumps(prompt, separators=(",", ":"))
            context = parsed.get("context")
        else:
            prompt, context = line, None
        if not prompt:
            emit("error", message="received empty prompt")
            continue
        n += 1
        try:
            session(lines, n, prompt, context)
        except Exception as error:  # the session fails, the agent goes on
            emit("error", session=n, message=f"session failed: {error}")


if __name__ == "__main__":
    main()
