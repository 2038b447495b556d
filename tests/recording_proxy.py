"""A recording HTTP proxy: what an agent CLI really sends, kept for a test to read.

The agent talks to the proxy, the proxy forwards each request to the server unchanged and
hands back the server's whole answer (an SSE stream arrives at once, which clients accept),
and records (method, path, headers, JSON body, status, response bytes).
"""

from __future__ import annotations

import http.client
import http.server
import json
import threading
from dataclasses import dataclass, field
from typing import Any

_HOP_BY_HOP = {"host", "content-length", "connection", "transfer-encoding", "keep-alive", "accept-encoding"}


@dataclass
class Exchange:
    method: str
    path: str
    headers: dict[str, str]
    body: Any
    status: int = 0
    response: bytes = b""


@dataclass
class RecordingProxy:
    target_port: int
    exchanges: list[Exchange] = field(default_factory=list)

    def __post_init__(self) -> None:
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def forward(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                record = Exchange(self.command, self.path, dict(self.headers), json.loads(raw) if raw else None)
                proxy.exchanges.append(record)
                conn = http.client.HTTPConnection("127.0.0.1", proxy.target_port, timeout=300)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                conn.request(self.command, self.path, body=raw or None, headers=headers)
                answer = conn.getresponse()
                record.status, record.response = answer.status, answer.read()
                self.send_response(answer.status)
                for key, value in answer.getheaders():
                    if key.lower() not in _HOP_BY_HOP:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(record.response)))
                self.end_headers()
                self.wfile.write(record.response)
                conn.close()

            do_GET = do_POST = do_HEAD = forward

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def messages(self) -> list[Exchange]:
        """The POST /v1/messages exchanges (count_tokens and the rest left out)."""
        return [e for e in self.exchanges if e.method == "POST" and e.path.split("?")[0] == "/v1/messages"]
