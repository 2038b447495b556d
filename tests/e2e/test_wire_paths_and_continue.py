"""The wire, hostile: routing on the path as sent (a %2F is a parameter's "/", never a route's),
Host ports, Expect: 100-continue on a request refused from its head alone, framing tricks that
must close the connection before anything after them is read as a request."""

from __future__ import annotations

import json

import pytest

from clients import openai_sdk
from conftest import ServerProcess
from rawhttp import RawConnection, post_json, request

KEY = "sk-wire-test"
AUTH = f"Authorization: Bearer {KEY}\r\n"
GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"


@pytest.fixture(scope="module")
def srv(tiny_model):
    server = ServerProcess(tiny_model, "--model-id", "org/tiny:q4", "--api-key", KEY, "--no-store")
    yield server
    server.stop()


def get(srv, target: str, headers: str = AUTH):
    return request(srv.port, f"GET {target} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode())


# ---- paths --------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/v1%2Fchat%2Fcompletions", "/v1/chat%2Fcompletions", "/v1/%63hat/completions"])
def test_an_escaped_route_is_not_served(srv, path):
    body = {"model": "org/tiny:q4", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    resp = request(srv.port, post_json(path, body, AUTH))
    assert resp.status == 404 and resp.json()["error"]["code"] == "not_found"
    assert request(srv.port, post_json("/v1/chat/completions", body, AUTH)).status == 200


def test_a_model_id_with_a_slash_is_named_by_its_escape(srv):
    resp = get(srv, "/v1/models/org%2Ftiny%3Aq4")
    assert resp.status == 200 and resp.json()["id"] == "org/tiny:q4"
    assert get(srv, "/v1/models/org/tiny:q4").status == 404
    # the official SDK escapes the "/" of an id in its path
    assert openai_sdk(srv, api_key=KEY).models.retrieve("org/tiny:q4").id == "org/tiny:q4"


def test_a_parameter_that_is_no_utf_8_is_a_400(srv):
    resp = get(srv, "/v1/models/%FF")
    assert resp.status == 400 and resp.json()["error"]["code"] == "invalid_path"


# ---- Host ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["localhost:65535", "[::1]:8080", "127.0.0.1"])
def test_a_host_with_any_port_and_an_ipv6_literal_is_served(srv, host):
    assert request(srv.port, f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()).status == 200


@pytest.mark.parametrize("host", ["localhost:99999999999999999999", "localhost:65536", "[::1::1]"])
def test_a_host_past_the_ports_or_no_ipv6_address_is_a_400_and_the_server_serves_on(srv, host):
    resp = request(srv.port, f"GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    assert resp.status == 400 and "Host" in resp.json()["error"]["message"]
    assert request(srv.port, GET_HEALTH).status == 200


def test_http_1_0_without_host_is_still_served(srv):
    assert request(srv.port, b"GET /health HTTP/1.0\r\n\r\n").status == 200


# ---- Expect: 100-continue --------------------------------------------------------------------

def expecting(path: str, headers: str = AUTH, length: int = 1000) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Expect: 100-continue\r\nContent-Length: {length}\r\n{headers}\r\n").encode()


@pytest.mark.parametrize("path, headers, status, code", [
    ("/v1/chat/completions", "", 401, "invalid_api_key"),
    ("/v1/nowhere", AUTH, 404, "not_found"),
    ("/v1/models", AUTH, 405, "method_not_allowed"),
])
def test_a_request_refused_from_its_head_hears_so_before_it_sends_its_body(srv, path, headers, status, code):
    conn = RawConnection(srv.port)
    try:
        conn.send(expecting(path, headers))
        resp = conn.read_response()         # not a 100 Continue: the answer itself
        assert resp.status == status and resp.json()["error"]["code"] == code
        assert resp.header("connection") == "close"
    finally:
        conn.close()
    assert request(srv.port, GET_HEALTH).status == 200


def test_an_anthropic_route_refused_from_its_head_answers_in_its_shape(srv):
    conn = RawConnection(srv.port)
    try:
        conn.send(expecting("/v1/messages", ""))
        resp = conn.read_response()
        assert resp.status == 401 and resp.json()["type"] == "error"
    finally:
        conn.close()


def test_a_request_that_may_be_served_gets_its_100_continue(srv):
    body = json.dumps({"model": "org/tiny:q4", "content": "hi"}).encode()
    conn = RawConnection(srv.port)
    try:
        conn.send(expecting("/tokenize", AUTH, len(body)))
        assert conn.read_response().status == 100
        conn.send(body)
        assert conn.read_response().status == 200
    finally:
        conn.close()


def test_a_body_too_large_with_expect_is_413_without_a_100(srv):
    conn = RawConnection(srv.port)
    try:
        conn.send(expecting("/v1/chat/completions", AUTH, 10 ** 12))
        assert conn.read_response().status == 413
    finally:
        conn.close()


# ---- framing: nothing after a bad frame is read as a request -------------------------------------

@pytest.mark.parametrize("frame", [
    # differing Content-Lengths: either would frame the next request somewhere else
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nContent-Length: 47\r\n\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0, 47\r\n\r\n",
    # Transfer-Encoding beside Content-Length, and one that is not chunked last
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
    # a folded Transfer-Encoding line (obs-fold), a chunk size past 64 bits, a bare-LF chunk line
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000000\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n5;ext\nhello\r\n",
])
def test_a_bad_frame_is_answered_and_what_follows_it_is_never_served(srv, frame):
    conn = RawConnection(srv.port)
    try:
        conn.send(frame + GET_HEALTH + GET_HEALTH)
        assert conn.read_response().status in (400, 501)
        assert conn.is_closed()             # the pipelined GETs were never answered
    finally:
        conn.close()
    assert request(srv.port, GET_HEALTH).status == 200


def test_a_chunk_size_of_64_bits_is_413_not_a_wait(srv):
    resp = request(srv.port, b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"FFFFFFFFFFFFFFFF;ext=1\r\n")
    assert resp.status == 413


def test_pipelined_requests_before_an_error_are_answered_in_order(srv):
    conn = RawConnection(srv.port)
    try:
        conn.send(GET_HEALTH + b"GET /health HTTP/1.1\r\nHost: localhost:65536\r\n\r\n" + GET_HEALTH)
        assert conn.read_response().status == 200
        assert conn.read_response().status == 400
        assert conn.is_closed()
    finally:
        conn.close()
