"""The hand-written HTTP/1.1 server on the wire: every rule of the walking skeleton."""

from __future__ import annotations

import json
import signal
import socket
import time

import pytest

from conftest import ServerProcess, slow_model
from rawhttp import RawConnection, post_json, request
from tinymodel import NO_EOG

GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"


def assert_openai_error(resp, status):
    assert resp.status == status
    assert resp.header("content-type") == "application/json"
    error = resp.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["message"]
    return error


def test_health(server):
    resp = request(server.port, b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert resp.status == 200 and resp.json()["status"] == "ok"
    assert resp.header("request-id")


def test_keep_alive_by_default_and_pipelining_in_order(server):
    conn = RawConnection(server.port)
    conn.send(GET_HEALTH + b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n"
              + b"GET /nope HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert conn.read_response().status == 200
    models = conn.read_response()
    assert models.status == 200 and models.json()["object"] == "list"
    assert conn.read_response().status == 404
    conn.send(GET_HEALTH)                      # still open after three requests
    assert conn.read_response().status == 200
    conn.close()


def test_connection_close_is_honoured(server):
    conn = RawConnection(server.port)
    conn.send(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    resp = conn.read_response()
    assert resp.status == 200 and resp.header("connection") == "close"
    assert conn.is_closed()


def test_http10_closes_unless_keep_alive(server):
    conn = RawConnection(server.port)
    conn.send(b"GET /health HTTP/1.0\r\n\r\n")
    assert conn.read_response().status == 200
    assert conn.is_closed()
    conn = RawConnection(server.port)
    conn.send(b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    resp = conn.read_response()
    assert resp.status == 200 and resp.header("connection").lower() == "keep-alive"
    conn.send(b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    assert conn.read_response().status == 200
    conn.close()


def test_chunked_request_body(server):
    body = json.dumps({"content": "hello world"}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 5]), body[i:i + 5]) for i in range(0, len(body), 5))
    resp = request(server.port, b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n"
                   b"Content-Type: application/json\r\n\r\n"
                   + chunks + b"0\r\n\r\n")
    assert resp.status == 200 and resp.json()["tokens"]


def test_expect_100_continue(server):
    body = json.dumps({"content": "hi"}).encode()
    conn = RawConnection(server.port)
    conn.send(b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nExpect: 100-continue\r\n"
              b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body))
    assert conn.read_response().status == 100
    conn.send(body)
    assert conn.read_response().status == 200
    conn.close()


def test_request_line_too_large_is_431(server):
    resp = request(server.port, b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert_openai_error(resp, 431)


def test_headers_too_large_is_431(server):
    headers = b"".join(b"X-Filler-%d: %s\r\n" % (i, b"v" * 1000) for i in range(80))
    resp = request(server.port, b"GET /health HTTP/1.1\r\nHost: localhost\r\n" + headers + b"\r\n")
    assert_openai_error(resp, 431)


def test_body_too_large_is_413(tiny_model):
    srv = ServerProcess(tiny_model, "--max-body-bytes", "1000")
    try:
        resp = request(srv.port, post_json("/tokenize", {"content": "x" * 2000}))
        assert_openai_error(resp, 413)
        resp = request(srv.port, post_json("/tokenize", {"content": "x" * 10}))
        assert resp.status == 200
    finally:
        srv.stop()


@pytest.mark.parametrize("raw", [
    b"GARBAGE\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: localhost\r\nBad Header\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Bad : v\r\n\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: abc\r\n\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
])
def test_malformed_requests_are_400(server, raw):
    conn = RawConnection(server.port)
    conn.send(raw)
    assert_openai_error(conn.read_response(), 400)
    assert conn.is_closed()


def test_unsupported_method_is_405_with_allow(server):
    resp = request(server.port, b"DELETE /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert_openai_error(resp, 405)
    assert "GET" in resp.header("allow")
    resp = request(server.port, b"GET /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert_openai_error(resp, 405)
    assert resp.header("allow").startswith("POST")


def test_unknown_path_is_404(server):
    assert_openai_error(request(server.port, b"GET /v2/nothing HTTP/1.1\r\nHost: localhost\r\n\r\n"), 404)


def websocket_handshake(path: str) -> bytes:
    """What Codex's Responses client opens with (RFC 6455 §4.1)."""
    return (f"GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
            "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Authorization: Bearer test-key\r\n\r\n").encode()


def test_a_websocket_handshake_is_refused_with_426_and_the_connection_goes_on(server):
    """426 is the answer Codex falls back to HTTP on at once (a 405 cost it ~7 s of retries)."""
    conn = RawConnection(server.port)
    conn.send(websocket_handshake("/v1/responses"))
    resp = conn.read_response()
    error = assert_openai_error(resp, 426)
    assert error["code"] == "websocket_not_supported" and error["type"] == "invalid_request_error"
    assert resp.header("upgrade") == "HTTP/1.1"
    conn.send(GET_HEALTH)                      # a plain HTTP connection still, ready for the next request
    assert conn.read_response().status == 200
    conn.close()


def test_the_websocket_refusal_leaves_plain_gets_of_responses_alone(server):
    stored = request(server.port, post_json("/v1/responses", {"model": "tiny", "input": "hi", "max_output_tokens": 2}))
    assert stored.status == 200, stored.body
    path = f"/v1/responses/{stored.json()['id']}"
    assert request(server.port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()).json()["id"] == \
        stored.json()["id"]
    assert_openai_error(request(server.port, websocket_handshake(path)), 426)
    # without Upgrade the collection path keeps its 405; an unknown path stays 404 either way
    assert_openai_error(request(server.port, b"GET /v1/responses HTTP/1.1\r\nHost: localhost\r\n\r\n"), 405)
    assert_openai_error(request(server.port, websocket_handshake("/v2/nothing")), 404)


def test_options_is_204_with_allow(server):
    resp = request(server.port, b"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert resp.status == 204
    assert "POST" in resp.header("allow") and "OPTIONS" in resp.header("allow")


def test_head_has_no_body(server):
    # rawhttp fails a HEAD response followed by any byte; the connection then serves a GET cleanly
    conn = RawConnection(server.port)
    conn.send(b"HEAD /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
    head = conn.read_response(head_request=True)
    conn.send(b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n")
    get = conn.read_response()
    conn.close()
    assert head.status == 200 and get.status == 200
    assert int(head.header("content-length")) == len(get.body) > 0
    assert head.header("content-type") == get.header("content-type")


@pytest.mark.parametrize("body,needle", [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b"", "empty"),
])
def test_invalid_json_is_400(server, body, needle):
    error = assert_openai_error(request(server.port, post_json("/v1/chat/completions", body)), 400)
    assert needle in error["message"]


def test_slow_headers_are_disconnected(tiny_model):
    # The idle timeout is an hour: only the header clock can close the connection within the wait.
    srv = ServerProcess(tiny_model, "--header-timeout", "0.5", "--idle-timeout", "3600")
    try:
        slow = RawConnection(srv.port)
        slow.send(b"GET /health HTTP/1.1\r\n")
        assert slow.is_closed(timeout=30)
        assert request(srv.port, GET_HEALTH).status == 200    # others unharmed
    finally:
        srv.stop()


def test_idle_connection_is_closed(tiny_model):
    srv = ServerProcess(tiny_model, "--idle-timeout", "0.5")
    try:
        conn = RawConnection(srv.port)
        conn.send(GET_HEALTH)
        assert conn.read_response().status == 200
        assert conn.is_closed(timeout=5)
    finally:
        srv.stop()


def test_sigterm_drains_in_flight_requests_and_exits_0(models_dir):
    # A prompt of seconds of prefill on the slow model: the request is surely in flight at SIGTERM.
    srv = ServerProcess(slow_model(models_dir), "--ctx-size", "8192", "--prefill-keepalive", "0.2", "--no-store")
    try:
        conn = RawConnection(srv.port, timeout=60)
        conn.send(post_json("/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hello world " * 1500}], "max_tokens": 3, "stream": True,
            "stream_options": {"include_usage": True}, "logit_bias": NO_EOG}))
        received = b""
        while b": prefill" not in received and b"data: [DONE]" not in received:
            received += conn.sock.recv(65536)        # headers out, the prompt still prefilling
        assert b"data: [DONE]" not in received, "the request ended before SIGTERM: nothing left to drain"
        srv.proc.send_signal(signal.SIGTERM)
        while chunk := conn.sock.recv(65536):         # the server finishes the stream, then closes
            received += chunk
        assert srv.stop() == 0
        chunks = [json.loads(line[6:]) for line in received.decode().split("\n") if line.startswith("data: {")]
        assert received.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
        assert chunks[-1]["usage"]["completion_tokens"] == 3
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()
    finally:
        srv.stop()


def test_models_through_the_openai_sdk(openai_client, server):
    models = openai_client.models.list()
    assert [m.id for m in models.data] == ["tiny"]
    model = models.data[0]
    assert model.object == "model" and model.owned_by == "localserve"
    meta = model.model_extra["meta"]
    assert meta["n_ctx"] > 0 and meta["n_params"] > 0 and meta["size"] > 0 and meta["architecture"] == "llama"
    assert openai_client.models.retrieve("tiny").id == "tiny"


def test_unknown_model_is_404(openai_client):
    import openai
    with pytest.raises(openai.NotFoundError):
        openai_client.models.retrieve("other")


def test_health_is_exactly_ok_on_a_local_model(server):
    resp = request(server.port, GET_HEALTH)
    assert resp.json() == {"status": "ok"}


def test_a_body_dripped_slowly_is_cut_off(tiny_model):
    srv = ServerProcess(tiny_model, "--idle-timeout", "1")
    try:
        conn = RawConnection(srv.port)
        conn.send(b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n")
        # One byte every 0.3 s: each read is within the idle timeout, the whole body (30 s) is not.
        # The body must be cut off before it is all sent (a clock per read would take it whole).
        sent = 0
        while sent < 100:
            try:
                conn.send(b"x")
            except OSError:
                break
            sent += 1
            if conn.is_closed(timeout=0.3):
                break
        assert sent < 100, "the whole body was taken, one slow byte at a time"
        assert request(srv.port, GET_HEALTH).status == 200
    finally:
        srv.stop()


def health_once_a_place_is_free(port: int, timeout: float = 10.0) -> RawConnection:
    """A keep-alive connection whose /health got a 200. A connection that just closed (the start-up
    probe's, a test's) holds its place until its thread has read the EOF: on a busy box that can be
    a moment, so a 503 for that reason is retried."""
    deadline = time.monotonic() + timeout
    while True:
        conn = RawConnection(port)
        conn.send(GET_HEALTH)
        status = conn.read_response().status
        if status == 200:
            return conn
        conn.close()
        assert status == 503 and time.monotonic() < deadline, status
        time.sleep(0.05)


def test_connections_beyond_the_limit_get_503(tiny_model):
    srv = ServerProcess(tiny_model, "--max-connections", "3")
    try:
        held = [health_once_a_place_is_free(srv.port) for _ in range(3)]    # three open keep-alive connections
        extra = RawConnection(srv.port)
        resp = extra.read_response()
        assert resp.status == 503 and "max-connections" in resp.json()["error"]["message"]
        held[0].close()
        health_once_a_place_is_free(srv.port).close()       # a freed place is usable again
    finally:
        srv.stop()
