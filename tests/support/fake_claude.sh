#!/usr/bin/env bash
# A scripted `claude -p --input-format stream-json --output-format stream-json` for what
# the real one cannot produce on demand (tests/claude.rs). FAKE_CLAUDE_MODE:
#   normal  answers each turn "echo: <prompt>" (after FAKE_CLAUDE_DELAY seconds, default 0)
#   crash   says something on stderr and exits 1 before its result
#   hang    prints its system line, then ignores its input and every signal but KILL
# Its arguments go to $FAKE_CLAUDE_LOG.args, its environment to $FAKE_CLAUDE_LOG.env, every
# line it reads is appended to $FAKE_CLAUDE_LOG.
set -u
mode="${FAKE_CLAUDE_MODE:-normal}"
log="${FAKE_CLAUDE_LOG:-/dev/null}"
if [ "${1:-}" = "--version" ]; then echo "9.9.9 (Fake Claude)"; exit 0; fi
if [ "$log" != /dev/null ]; then
  env > "$log.env"
  printf '%s\n' "$@" >> "$log.args"
fi
sid="fake-session-1"
prev=""
while [ $# -gt 0 ]; do
  [ "$prev" = "--resume" ] && sid="$1"
  prev="$1"; shift
done
send() { printf '%s\n' "$1"; }
send "{\"type\":\"system\",\"subtype\":\"init\",\"session_id\":\"$sid\",\"cwd\":\"$PWD\"}"
if [ "$mode" = crash ]; then
  echo "fatal: simulated crash" >&2
  exit 1
fi
if [ "$mode" = hang ]; then
  trap '' TERM HUP INT
  exec sleep 1000
fi
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$log"
  case "$line" in
    *'"type":"user"'*)
      prompt=$(printf '%s' "$line" | sed -n 's/.*"content":"\([^"]*\)".*/\1/p')
      sleep "${FAKE_CLAUDE_DELAY:-0}"
      send "{\"type\":\"stream_event\",\"event\":{\"type\":\"message_start\",\"message\":{\"id\":\"m1\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}},\"parent_tool_use_id\":null,\"session_id\":\"$sid\"}"
      send "{\"type\":\"stream_event\",\"event\":{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"echo: $prompt\"}},\"parent_tool_use_id\":null,\"session_id\":\"$sid\"}"
      send "{\"type\":\"result\",\"subtype\":\"success\",\"is_error\":false,\"result\":\"echo: $prompt\",\"session_id\":\"$sid\",\"usage\":{\"input_tokens\":3,\"output_tokens\":2}}"
      ;;
  esac
done
exit 0
