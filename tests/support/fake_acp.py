#!/usr/bin/env python3
"""A scripted ACP v1 agent for what a real agent cannot be made to do on demand.

Mode from $FAKE_ACP_MODE: `auth` (advertises authMethods, accepts `authenticate`),
`permission` (asks session/request_permission, answers with the outcome it got),
`crash` (dies mid-update after writing a last stderr line), `fs_outside` (asks the
client to read a file outside the workspace and reports the answer), `terminal` (runs
commands in client terminals, embeds one in a tool call, and reports what the client
answered), `terminal_linger` (leaves a terminal running when the turn ends), `schema`
(exercises every client method once, for the schema check), `hang_init` (never answers
`initialize`: an agent stuck while starting). Every line it receives is
appended to $FAKE_ACP_LOG, every line it sends too, prefixed `SENT `.
"""
import json
import os
import sys

MODE = os.environ.get("FAKE_ACP_MODE", "")
LOG = os.environ.get("FAKE_ACP_LOG")
pending = {}
next_id = [100]


def log(line):
    if LOG:
        with open(LOG, "a") as f:
            f.write(line.rstrip("\n") + "\n")


def send(obj):
    obj["jsonrpc"] = "2.0"
    log("SENT " + json.dumps(obj))
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def text(sid, t):
    send({"method": "session/update", "params": {"sessionId": sid, "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": t}}}})


def ask(method, params):
    next_id[0] += 1
    send({"id": next_id[0], "method": method, "params": params})
    while True:
        line = sys.stdin.readline()
        if not line:
            sys.exit(0)
        log(line)
        msg = json.loads(line)
        if msg.get("id") == next_id[0] and "method" not in msg:
            return msg


def update(sid, u):
    send({"method": "session/update", "params": {"sessionId": sid, "update": u}})


def terminal(sid, command, args=None, **extra):
    """Creates a terminal; returns its id, or the error message."""
    p = {"sessionId": sid, "command": command}
    if args is not None:
        p["args"] = args
    p.update(extra)
    r = ask("terminal/create", p)
    if "error" in r:
        return None, r["error"]["message"]
    return r["result"]["terminalId"], None


def term_call(sid, name, t, **extra):
    return ask("terminal/" + name, dict({"sessionId": sid, "terminalId": t}, **extra))


def run_terminals(sid):
    """The `terminal` mode's prompt: reports every answer as JSON lines of text."""
    report = {}
    t, err = terminal(sid, "sh", ["-c", "echo out; echo err >&2; exit 3"])
    update(sid, {"sessionUpdate": "tool_call", "toolCallId": "term-call", "title": "sh",
                 "kind": "execute", "status": "in_progress",
                 "content": [{"type": "terminal", "terminalId": t}]})
    report["wait"] = term_call(sid, "wait_for_exit", t).get("result")
    report["output"] = term_call(sid, "output", t).get("result")
    update(sid, {"sessionUpdate": "tool_call_update", "toolCallId": "term-call",
                 "status": "completed"})
    report["release"] = term_call(sid, "release", t).get("result")
    report["after_release"] = "error" in term_call(sid, "output", t)
    # 8 × "é" is 16 bytes: the newest 5 bytes start inside a character.
    t, _ = terminal(sid, "printf 'éééééééé'", outputByteLimit=5)
    term_call(sid, "wait_for_exit", t)
    report["limited"] = term_call(sid, "output", t).get("result")
    t, _ = terminal(sid, "sleep", ["30"])
    report["killed_running"] = term_call(sid, "output", t).get("result")
    report["kill"] = term_call(sid, "kill", t).get("result")
    report["killed"] = term_call(sid, "wait_for_exit", t).get("result")
    term_call(sid, "release", t)
    t, _ = terminal(sid, "pwd; echo $GREETING", env=[{"name": "GREETING", "value": "hi"}],
                    cwd=os.path.join(os.getcwd(), "sub"))
    term_call(sid, "wait_for_exit", t)
    report["cwd_env"] = term_call(sid, "output", t)["result"]["output"]
    _, report["outside"] = terminal(sid, "ls", cwd="/")
    t, _ = terminal(sid, "touch written-by-terminal")
    report["touch"] = term_call(sid, "wait_for_exit", t).get("result")
    for k, v in report.items():
        text(sid, k + "=" + json.dumps(v, sort_keys=True) + "\n")


def run_schema(sid):
    """The `schema` mode's prompt: one of every agent request the client answers."""
    ask("session/request_permission", {"sessionId": sid,
        "toolCall": {"toolCallId": "tc1", "title": "touch x", "kind": "execute"},
        "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "no", "name": "Deny", "kind": "reject_once"}]})
    path = os.path.join(os.getcwd(), "schema.txt")
    ask("fs/write_text_file", {"sessionId": sid, "path": path, "content": "a\nb\n"})
    ask("fs/read_text_file", {"sessionId": sid, "path": path, "line": 2, "limit": 1})
    ask("fs/read_text_file", {"sessionId": sid, "path": "/etc/hostname"})
    t, _ = terminal(sid, "echo", ["hi"], outputByteLimit=100)
    term_call(sid, "wait_for_exit", t)
    term_call(sid, "output", t)
    term_call(sid, "kill", t)
    term_call(sid, "release", t)
    t, _ = terminal(sid, "sleep", ["30"])
    term_call(sid, "output", t)
    term_call(sid, "kill", t)
    term_call(sid, "wait_for_exit", t)
    ask("no/such_method", {})
    text(sid, "schema done")


log("ENV " + json.dumps(sorted(os.environ.keys())))
for line in sys.stdin:
    log(line)
    msg = json.loads(line)
    mid, method, p = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if method == "initialize" and MODE == "hang_init":
        log("HANGING " + str(os.getpid()))
    elif method == "initialize":
        res = {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}, "authMethods": []}
        if MODE in ("auth", "schema"):
            res["authMethods"] = [
                {"id": "fake-login", "name": "Fake login", "description": "signs in"},
                {"id": "term", "name": "Terminal login", "type": "terminal"},
            ]
        send({"id": mid, "result": res})
    elif method == "authenticate":
        if p.get("methodId") == "fake-login":
            send({"id": mid, "result": {}})
        else:
            send({"id": mid, "error": {"code": -32602, "message": "unknown method"}})
    elif method == "session/new":
        res = {"sessionId": "fake-session-1"}
        if MODE == "terminal":
            res["modes"] = {"currentModeId": "agent", "availableModes": [
                {"id": "agent", "name": "Agent"}, {"id": "read-only", "name": "Read only"}]}
        if MODE == "schema":
            res["modes"] = {"currentModeId": "ask", "availableModes": [
                {"id": "ask", "name": "Ask"}, {"id": "agent", "name": "Agent"}]}
        send({"id": mid, "result": res})
    elif method == "session/load":
        send({"id": mid, "result": {}})
    elif method == "session/prompt":
        sid = p.get("sessionId")
        if MODE == "crash":
            text(sid, "partial ")
            sys.stderr.write("fake agent: out of cheese\n")
            sys.stderr.flush()
            os._exit(3)
        if MODE == "permission":
            r = ask("session/request_permission", {"sessionId": sid,
                "toolCall": {"toolCallId": "tc1", "title": "rm -rf build", "kind": "execute",
                             "rawInput": {"command": "rm -rf build"}},
                "options": [{"optionId": "yes", "name": "Allow", "kind": "allow_once"},
                            {"optionId": "always", "name": "Always", "kind": "allow_always"},
                            {"optionId": "no", "name": "Deny", "kind": "reject_once"}]})
            text(sid, "outcome " + json.dumps(r.get("result", {}).get("outcome")))
        elif MODE == "terminal":
            run_terminals(sid)
        elif MODE == "terminal_linger":
            t, _ = terminal(sid, "sleep", ["987.654"])
            text(sid, "left " + str(t))
        elif MODE == "schema" and "wait for cancel" in json.dumps(p.get("prompt")):
            text(sid, "waiting")
            while True:
                line = sys.stdin.readline()
                if not line:
                    sys.exit(0)
                log(line)
                if json.loads(line).get("method") == "session/cancel":
                    break
            send({"id": mid, "result": {"stopReason": "cancelled"}})
            continue
        elif MODE == "schema" and "exercise" in json.dumps(p.get("prompt")):
            run_schema(sid)
        elif MODE == "fs_outside":
            r = ask("fs/read_text_file", {"sessionId": sid, "path": "/etc/hostname"})
            text(sid, "outside: " + ("refused" if "error" in r else "served"))
            inside = os.path.join(os.getcwd(), "inside.txt")
            r = ask("fs/read_text_file", {"sessionId": sid, "path": inside})
            text(sid, " inside: " + r.get("result", {}).get("content", "refused"))
        else:
            text(sid, "hello")
        send({"id": mid, "result": {"stopReason": "end_turn"}})
    elif method == "session/cancel":
        pass
    elif method == "session/set_mode":
        send({"id": mid, "result": {}})
    elif mid is not None:
        send({"id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
