#!/usr/bin/env python3
"""A scripted ACP v1 agent for what a real agent cannot be made to do on demand.

Mode from $FAKE_ACP_MODE: `auth` (advertises authMethods, accepts `authenticate`),
`permission` (asks session/request_permission, answers with the outcome it got),
`crash` (dies mid-update after writing a last stderr line), `fs_outside` (asks the
client to read a file outside the workspace and reports the answer). Every line it
receives is appended to $FAKE_ACP_LOG.
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


log("ENV " + json.dumps(sorted(os.environ.keys())))
for line in sys.stdin:
    log(line)
    msg = json.loads(line)
    mid, method, p = msg.get("id"), msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        res = {"protocolVersion": 1, "agentCapabilities": {"loadSession": True}, "authMethods": []}
        if MODE == "auth":
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
        send({"id": mid, "result": {"sessionId": "fake-session-1"}})
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
    elif mid is not None:
        send({"id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
