#!/usr/bin/env bash
# A scripted `codex app-server` for what the real one cannot produce on demand
# (tests/codex.rs). It speaks the app-server's JSON-RPC lines (no `jsonrpc` member).
# FAKE_CODEX_MODE: question | approval | crash | refuse | steer | lost | stubborn. Every line
# it reads is appended to FAKE_CODEX_LOG; its environment is written to $FAKE_CODEX_LOG.env
# at start. In `crash` mode the first host exits mid-turn; the file $FAKE_CODEX_LOG.crashed
# makes later hosts behave normally. In `stubborn` mode it ignores SIGTERM and SIGHUP,
# starts a `sleep` in a session of its own, and keeps running after stdin closes. A prompt
# containing HOLD keeps its turn running (normal and stubborn modes).
set -u
[ "${1:-}" = "app-server" ] || { echo "usage: fake-codex app-server" >&2; exit 2; }
mode="${FAKE_CODEX_MODE:-normal}"
log="${FAKE_CODEX_LOG:-/dev/null}"
if [ "$mode" = crash ] && [ -e "$log.crashed" ]; then mode=normal; fi
[ "$log" != /dev/null ] && env > "$log.env"
if [ "$mode" = stubborn ]; then
  trap '' TERM HUP
  setsid sleep 1000 < /dev/null > /dev/null 2>&1 &
fi
th="th_fake_1"
turn=0
send() { printf '%s\n' "$1"; }
wait_for() { # wait_for PATTERN: reads lines until one matches; prints it. An
  # interrupt meanwhile ends the turn as interrupted (status 1).
  local l
  while IFS= read -r l; do
    printf '%s\n' "$l" >> "$log"
    if [[ $l == *"$1"* ]]; then printf '%s' "$l"; return 0; fi
    if [[ $l == *'"method":"turn/interrupt"'* ]]; then
      [[ $l =~ \"id\":([0-9]+) ]]
      send "{\"id\":${BASH_REMATCH[1]},\"result\":{}}"
      send "{\"method\":\"turn/completed\",\"params\":{\"threadId\":\"$th\",\"turn\":{\"id\":\"t$turn\",\"items\":[],\"status\":\"interrupted\"}}}"
      return 1
    fi
  done
  exit 0
}
delta() { send "{\"method\":\"item/agentMessage/delta\",\"params\":{\"threadId\":\"$th\",\"turnId\":\"t$turn\",\"itemId\":\"m$turn\",\"delta\":\"$1\"}}"; }
complete() {
  send "{\"method\":\"item/completed\",\"params\":{\"threadId\":\"$th\",\"turnId\":\"t$turn\",\"completedAtMs\":0,\"item\":{\"type\":\"agentMessage\",\"id\":\"m$turn\",\"text\":\"$1\",\"phase\":\"final_answer\"}}}"
  send "{\"method\":\"turn/completed\",\"params\":{\"threadId\":\"$th\",\"turn\":{\"id\":\"t$turn\",\"items\":[],\"status\":\"completed\"}}}"
}
while IFS= read -r line; do
  printf '%s\n' "$line" >> "$log"
  [[ $line =~ \"id\":([0-9]+) ]] || continue
  id="${BASH_REMATCH[1]}"
  [[ $line =~ \"method\":\"([^\"]+)\" ]] || continue
  method="${BASH_REMATCH[1]}"
  case "$method" in
    initialize) send "{\"id\":$id,\"result\":{\"userAgent\":\"fake-codex/1\"}}" ;;
    config/read) send "{\"id\":$id,\"result\":{\"config\":{}}}" ;;
    model/list) send "{\"id\":$id,\"result\":{\"data\":[{\"id\":\"fake-1\",\"model\":\"fake-1\",\"displayName\":\"Fake One\",\"hidden\":false,\"isDefault\":true,\"defaultReasoningEffort\":\"medium\",\"supportedReasoningEfforts\":[{\"reasoningEffort\":\"low\"},{\"reasoningEffort\":\"medium\"}],\"serviceTiers\":[{\"id\":\"fast\"}],\"description\":\"\"}],\"nextCursor\":null}}" ;;
    thread/start|thread/resume) send "{\"id\":$id,\"result\":{\"thread\":{\"id\":\"$th\"}}}" ;;
    turn/start)
      turn=$((turn + 1))
      send "{\"id\":$id,\"result\":{\"turn\":{\"id\":\"t$turn\",\"items\":[],\"status\":\"inProgress\"}}}"
      case "$mode" in
        question)
          send "{\"id\":\"q$turn\",\"method\":\"item/tool/requestUserInput\",\"params\":{\"threadId\":\"$th\",\"turnId\":\"t$turn\",\"itemId\":\"call_q$turn\",\"isBlocking\":true,\"questions\":[{\"id\":\"color\",\"header\":\"Color\",\"question\":\"Pick a color\",\"isOther\":false,\"options\":[{\"label\":\"red\",\"description\":\"warm\"},{\"label\":\"blue\",\"description\":\"cold\"}]}]}}"
          answer=$(wait_for "\"id\":\"q$turn\"") || continue
          if [[ $answer == *'"blue"'* ]]; then delta "you chose blue"; complete "you chose blue";
          else delta "no answer"; complete "no answer"; fi ;;
        approval)
          send "{\"id\":\"a$turn\",\"method\":\"item/commandExecution/requestApproval\",\"params\":{\"threadId\":\"$th\",\"turnId\":\"t$turn\",\"itemId\":\"cmd$turn\",\"startedAtMs\":0,\"command\":\"rm -rf /tmp/x\",\"cwd\":\"/tmp\",\"reason\":\"needs escalation\"}}"
          answer=$(wait_for "\"id\":\"a$turn\"") || continue
          if [[ $answer == *'"decline"'* ]]; then delta "declined"; complete "declined";
          else delta "approved"; complete "approved"; fi ;;
        crash)
          delta "partial"
          touch "$log.crashed"
          echo "fake codex: simulated crash" >&2
          exit 3 ;;
        refuse|steer|lost)
          delta "working"
          req=$(wait_for '"method":"turn/steer"') || continue
          [[ $req =~ \"id\":([0-9]+) ]]; sid="${BASH_REMATCH[1]}"
          if [ "$mode" = lost ]; then
            : # never answered: the acknowledgement is lost
          elif [ "$mode" = refuse ]; then
            send "{\"id\":$sid,\"error\":{\"code\":-32000,\"message\":\"steer rejected: the turn is finishing\"}}"
          else
            send "{\"id\":$sid,\"result\":{\"turnId\":\"t$turn\"}}"
          fi
          # Let the host process the answer before the turn ends.
          sleep 0.3
          complete "finished" ;;
        *)
          # A prompt with HOLD keeps its turn running until it is interrupted or the
          # input ends (for tests that kill the client mid-turn).
          if [[ $line == *HOLD* ]]; then delta "holding"; wait_for '"method":"none"' || continue; fi
          delta "hello"; complete "hello" ;;
      esac ;;
    thread/compact/start)
      # Native compaction: `{}`, then a turn of its own with a contextCompaction item.
      turn=$((turn + 1))
      send "{\"id\":$id,\"result\":{}}"
      send "{\"method\":\"turn/started\",\"params\":{\"threadId\":\"$th\",\"turn\":{\"id\":\"t$turn\",\"items\":[],\"status\":\"inProgress\"}}}"
      send "{\"method\":\"item/started\",\"params\":{\"threadId\":\"$th\",\"turnId\":\"t$turn\",\"item\":{\"type\":\"contextCompaction\",\"id\":\"cc$turn\"}}}"
      send "{\"method\":\"item/completed\",\"params\":{\"threadId\":\"$th\",\"turnId\":\"t$turn\",\"completedAtMs\":0,\"item\":{\"type\":\"contextCompaction\",\"id\":\"cc$turn\"}}}"
      send "{\"method\":\"turn/completed\",\"params\":{\"threadId\":\"$th\",\"turn\":{\"id\":\"t$turn\",\"items\":[],\"status\":\"completed\"}}}" ;;
    turn/interrupt)
      send "{\"id\":$id,\"result\":{}}"
      send "{\"method\":\"turn/completed\",\"params\":{\"threadId\":\"$th\",\"turn\":{\"id\":\"t$turn\",\"items\":[],\"status\":\"interrupted\"}}}" ;;
    *) send "{\"id\":$id,\"error\":{\"code\":-32601,\"message\":\"fake: $method\"}}" ;;
  esac
done
if [ "$mode" = stubborn ]; then exec sleep 1000 < /dev/null > /dev/null 2>&1; fi
