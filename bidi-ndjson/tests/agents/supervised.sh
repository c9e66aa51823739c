#!/usr/bin/env bash
# An agent that serves one session per prompt line: progress, a question and an approval
# (each with an id, each waiting for its reply on stdin), then a result or an error.
set -u
session=0
while IFS= read -r prompt; do
  session=$((session + 1))
  echo "{\"type\":\"progress\",\"message\":\"session $session: prompt received\",\"phase\":\"ingest\",\"turn\":$session}"
  echo "{\"type\":\"question\",\"id\":\"session-$session-q1\",\"question\":\"Choose a plan for: $prompt\",\"kind\":\"design\",\"options\":[\"safe\",\"fast\"]}"
  IFS= read -r answer || exit 3
  echo "{\"type\":\"approval\",\"id\":\"session-$session-a1\",\"description\":\"Apply the plan\",\"risk_level\":\"medium\"}"
  IFS= read -r approval || exit 4
  case "$approval" in
    *'"value":"yes"'*|*'"value":true'*)
      echo "{\"type\":\"result\",\"text\":\"session $session complete\",\"session\":$session,\"answer\":$answer}" ;;
    *)
      echo "{\"type\":\"error\",\"message\":\"session $session rejected by supervisor\"}" ;;
  esac
done
