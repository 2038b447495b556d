"""The accept loop outlives any one connection it cannot take: a refused thread start is a 503 for
that client, and the next connection is served."""

from __future__ import annotations

import threading

from localserve.wire.http import Limits
from localserve.wire.server import HTTPServer
from rawhttp import RawConnection

GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"


def answer_ok(request, writer, request_id) -> None:
    writer.send(200, b'{"status": "ok"}')


def test_a_connection_whose_thread_cannot_start_gets_a_503_and_the_next_is_served(monkeypatch):
    server = HTTPServer(answer_ok, limits=Limits(), header_timeout=5, idle_timeout=5,
                        listener=HTTPServer.listen("127.0.0.1", 0))
    server.start()
    real_start = threading.Thread.start
    failures = [RuntimeError("can't start new thread")]

    def start(thread):
        if thread.name.startswith("conn-") and failures:
            raise failures.pop()
        return real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    port = server.address[1]
    try:
        refused = RawConnection(port, timeout=5)
        refused.send(GET_HEALTH)
        resp = refused.read_response()
        assert resp.status == 503 and resp.header("retry-after")
        assert "thread" in resp.json()["error"]["message"]
        served = RawConnection(port, timeout=5)
        served.send(GET_HEALTH)
        assert served.read_response().status == 200
        served.close()
        assert server._accept_thread.is_alive()
    finally:
        server.draining.set()
        server.listener.close()
