"""Slow bodies starve no one (issue 28, item 2): the budget holds what arrived, and a body that
arrives slower than MIN_BODY_BYTES_PER_SECOND is cut off with a 408."""

from __future__ import annotations

import socket

import pytest

from conftest import ServerProcess
from rawhttp import RawConnection, post_json, request

MB = 1024 * 1024
HEAD = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"


@pytest.fixture(scope="module")
def srv(tiny_model):
    # the default budget: four largest bodies at once
    server = ServerProcess(tiny_model, "--max-body-bytes", str(MB), "--no-store")
    yield server
    server.stop()


def drippers(port: int, chunked: bool) -> list[RawConnection]:
    conns = []
    for _ in range(4):
        conn = RawConnection(port, timeout=30)
        framing = b"Transfer-Encoding: chunked\r\n\r\nFFFFF\r\n{" if chunked else f"Content-Length: {MB}\r\n\r\n{{".encode()
        conn.send(HEAD + framing)
        conns.append(conn)
    return conns


@pytest.mark.parametrize("chunked", [False, True])
def test_four_bodies_announcing_the_most_leave_room_for_a_bystander(srv, chunked):
    conns = drippers(srv.port, chunked)
    try:
        resp = request(srv.port, post_json("/tokenize", {"content": "hello"}))
        assert resp.status == 200, resp.body
    finally:
        for conn in conns:
            conn.close()


def test_a_dripped_body_gets_408_and_the_connection_closes(srv):
    conn = RawConnection(srv.port, timeout=30)     # far below the idle timeout's 60 s
    conn.send(HEAD + b"Content-Length: 1000\r\n\r\n{")
    try:
        resp = conn.read_response()                # the server speaks first: it waits for no more bytes
        assert resp.status == 408 and resp.header("connection") == "close"
        assert "bytes a second" in resp.json()["error"]["message"]
    except socket.timeout:
        pytest.fail("a body that stopped arriving held its connection open")
    finally:
        conn.close()
