"""A scripted MCP server over stdio for the fault tests (tests/mcp.rs).

Tools: ok (readOnlyHint; echoes its arguments and what it sees of its environment),
write (not read-only), hang (never answers), crash (exits mid-call), huge (a 10 MB
result), malformed (a line that is not JSON). argv[1], when given, is a file created
at start (the tests see whether the server was started at all).
"""
import json
import os
import sys

if len(sys.argv) > 1:
    with open(sys.argv[1], "a") as f:
        f.write("started\n")


def send(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def tool(name, read_only):
    return {
        "name": name,
        "description": "fake tool " + name,
        "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
        "annotations": {"readOnlyHint": read_only},
    }


TOOLS = [tool("ok", True), tool("write", False), tool("hang", True), tool("crash", True),
         tool("huge", True), tool("malformed", True)]

for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    mid = msg.get("id")
    method = msg.get("method")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": mid, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "faulty", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name = msg["params"]["name"]
        args = msg["params"].get("arguments") or {}
        if name == "hang":
            continue
        if name == "crash":
            sys.stderr.write("fake server: crashing on purpose\n")
            sys.stderr.flush()
            os._exit(3)
        if name == "huge":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "content": [{"type": "text", "text": "x" * (10 * 1024 * 1024)}]}})
            continue
        if name == "malformed":
            sys.stdout.write('{"jsonrpc": "2.0", "id": %d, "result": {oops\n' % mid)
            sys.stdout.flush()
            continue
        text = "%s-marker args=%s env=%s secret_seen=%s" % (
            name, json.dumps(args, sort_keys=True), os.environ.get("FAKE_MCP_VAR", ""),
            "FAKE_SECRET_TOKEN" in os.environ)
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
    elif mid is not None:
        send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "no " + str(method)}})
