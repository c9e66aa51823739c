#!/usr/bin/env bash
# Behaves as Concerto's example middleware agent (`mock_external_agent.sh` in
# Digine-Labs/concerto-lang, examples/bidirectional_host_middleware/host), written anew from
# its behaviour: one session per prompt line (blank lines skipped); progress, then a question
# and an approval, each with an id, each waiting for its reply line. A reply's value is read
# with the regex "value":"([^"]*)" as the original reads it (a value that is not a string
# reads as none): no decision is "no-decision", no approval is "no". An approval of "yes" ends
# the session with a result, anything else with an error. The end of the input while waiting
# for a reply ends the agent quietly.
set -euo pipefail

# The text as the inside of a JSON string.
json_text() {
  local text=$1
  text=${text//\\/\\\\}
  text=${text//\"/\\\"}
  printf '%s' "$text"
}

# The string value of the reply on $1, or nothing.
reply_value() {
  local value_re='"value":"([^"]*)"'
  if [[ $1 =~ $value_re ]]; then
    printf '%s' "${BASH_REMATCH[1]}"
  fi
}

n=0
while IFS= read -r line; do
  [[ -n $line ]] || continue
  n=$((n + 1))
  prompt=$(json_text "$line")
  printf '{"type":"progress","message":"session %d: prompt received","phase":"ingest","turn":%d}\n' "$n" "$n"
  printf '{"type":"question","id":"session-%d-q1","question":"Choose an implementation plan for: %s","kind":"design","options":["safe","fast"]}\n' "$n" "$prompt"
  IFS= read -r reply || exit 0
  decision=$(reply_value "$reply")
  decision=$(json_text "${decision:-no-decision}")
  printf '{"type":"approval","id":"session-%d-a1","description":"Apply decision %s to branch","risk_level":"medium"}\n' "$n" "$decision"
  IFS= read -r reply || exit 0
  approved=$(reply_value "$reply")
  if [[ ${approved:-no} == yes ]]; then
    printf '{"type":"result","text":"session %d complete","session":%d,"prompt":"%s","decision":"%s","approved":"yes"}\n' \
      "$n" "$n" "$prompt" "$decision"
  else
    printf '{"type":"error","message":"session %d rejected by supervisor"}\n' "$n"
  fi
done
