"""A recording HTTP forwarder for end-to-end tests with real clients: the client talks to the
tap, the tap passes every request on to the real server unchanged and the answer back, and
keeps both, so a test can check what a client (Codex, Claude Code) actually sent and what
the server answered. Answers are passed back whole (a stream arrives at once), which clients
accept."""

from __future__ import annotations

import http.client
import http.server
import threading
from dataclasses import dataclass
from typing import Any

import orjson

# How often serve_forever looks for shutdown(): its default, 0.5 s, was up to half a second of
# the teardown of every test with a tap.
SHUTDOWN_POLL = 0.02
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host"}


@dataclass
class Exchange:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    status: int
    response_headers: dict[str, str]
    response: bytes

    def json(self) -> Any:
        return orjson.loads(self.body)


class Wiretap:
    def __init__(self, target_port: int):
        self.target_port = target_port
        self.exchanges: list[Exchange] = []
        tap = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                upstream = http.client.HTTPConnection("127.0.0.1", tap.target_port, timeout=300)
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                upstream.close()
                reply = {k: v for k, v in answer.getheaders() if k.lower() not in _HOP_BY_HOP}
                tap.exchanges.append(Exchange(self.command, self.path, dict(self.headers), body,
                                              answer.status, reply, data))
                self.send_response(answer.status)
                for key, value in reply.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = do_PUT = _forward

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(SHUTDOWN_POLL,), daemon=True)
        self.thread.start()

    def posts(self, path_prefix: str) -> list[Exchange]:
        return [e for e in self.exchanges if e.method == "POST" and e.path.startswith(path_prefix)]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
