#!/usr/bin/env python3
"""A scripted `opencode serve` for what the real server cannot be made to do on demand.

Speaks just enough of OpenCode's HTTP + SSE API for one turn: the listening line,
`/global/health`, `/global/event` (server.connected, then silence), `POST /session`,
`PATCH /session/<id>`. The prompt (`POST /session/<id>/message`) depends on
$FAKE_OPENCODE_MODE: `crash` writes a last stderr line and exits; `hang` never answers,
and `/session/<id>/abort` answers without stopping anything. `hang_start` never prints
its listening line (a server stuck while starting; it writes its pid to stderr).
"""
import http.server
import json
import os
import sys
import time

MODE = os.environ.get("FAKE_OPENCODE_MODE", "")


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/global/health":
            return self.reply({"healthy": True, "version": "1.0.0-fake"})
        if path == "/global/event":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            ev = {"payload": {"type": "server.connected", "properties": {}}}
            self.wfile.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
            self.wfile.flush()
            while True:
                time.sleep(3600)
        self.send_response(404)
        self.end_headers()

    def do_PATCH(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        return self.reply({"id": self.path.split("?")[0].rsplit("/", 1)[-1]})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        path = self.path.split("?")[0]
        if path == "/session":
            return self.reply({"id": "ses_fake1"})
        if path.endswith("/abort"):
            return self.reply(True)
        if path.endswith("/message"):
            if MODE == "crash":
                sys.stderr.write("simulated crash\n")
                sys.stderr.flush()
                os._exit(3)
            while True:
                time.sleep(3600)
        self.send_response(404)
        self.end_headers()


if MODE == "hang_start":
    with open(os.environ["FAKE_OPENCODE_PID_FILE"], "w") as f:
        f.write(str(os.getpid()))
    while True:
        time.sleep(3600)

server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
print(f"opencode server listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
