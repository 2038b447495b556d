"""A hostile local client on the wire (issue 15, wire half): memory per request, the in-flight
body budget, silent connections, refusals the client can read, HEAD, OPTIONS *, the target's
authority and Host syntax, a replay cursor past SQLite's integers.

Each test names what it guards; each failed against the code before its fix.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time

import pytest

from conftest import ROOT, ServerProcess
from procstat import memory_bytes
from rawhttp import RawConnection, post_json, request
from tinymodel import NO_EOG

GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
GET_METRICS = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"
MB = 1024 * 1024


@pytest.fixture(scope="module")
def stored(tiny_model, tmp_path_factory):
    """A server that stores responses, and the id of one stored response."""
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--data-dir", str(tmp_path_factory.mktemp("data")))
    resp = request(srv.port, post_json("/v1/responses", {"model": "tiny", "input": "hi", "max_output_tokens": 3}))
    assert resp.status == 200, resp.body
    yield srv, resp.json()["id"]
    srv.stop()


# ---- item 7: a replay cursor beyond SQLite's integers ----------------------------------------

def test_starting_after_past_64_bits_is_400_naming_it(stored):
    srv, response_id = stored
    resp = request(srv.port, f"GET /v1/responses/{response_id}?stream=true&starting_after=99999999999999999999999999 "
                             f"HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    assert resp.status == 400, resp.body
    assert resp.json()["error"]["param"] == "starting_after"
    ok = request(srv.port, f"GET /v1/responses/{response_id}?stream=true&starting_after=9223372036854775807 "
                           f"HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
    assert ok.status == 200 and ok.body == b""     # the largest cursor SQLite can hold: nothing after it


def nested(depth: int) -> bytes:
    return b'{"a":' * depth + b"1" + b"}" * depth


def test_a_body_nested_past_what_can_be_stored_is_400_not_500(stored):
    srv, _ = stored
    head = b'{"model":"tiny","input":"hi","max_output_tokens":2,"extra":'
    resp = request(srv.port, post_json("/v1/responses", head + nested(300) + b"}"))
    assert resp.status == 400 and resp.json()["error"]["code"] == "json_too_deep"    # was a 500 from the store
    ok = request(srv.port, post_json("/v1/responses", head + nested(100) + b"}"))
    assert ok.status == 200, ok.body


@pytest.mark.parametrize("ref", [[], {}, 5])
def test_a_schema_ref_that_is_not_a_string_is_400(stored, ref):
    """Found by make fuzz: $ref was used as a dict key before its type was checked (a 500)."""
    srv, _ = stored
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1,
            "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": ref}}}}
    resp = request(srv.port, post_json("/v1/chat/completions", body))
    assert resp.status == 400 and resp.json()["error"]["param"] == "response_format", resp.body


# ---- item 8: HEAD never has a body -------------------------------------------------------------

def read_until(sock: socket.socket, marker: bytes, timeout: float = 10.0) -> bytes:
    sock.settimeout(timeout)
    data = b""
    while marker not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_head_of_a_replayed_stream_is_the_head_alone(stored):
    srv, response_id = stored
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
        # HEAD, then GET /health on the same keep-alive connection: the bytes after the first
        # head must be the second response, not an event stream
        sock.sendall(f"HEAD /v1/responses/{response_id}?stream=true HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
                     + GET_HEALTH)
        data = read_until(sock, b'{"status":"ok"}')
    head, _, rest = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
    assert rest.startswith(b"HTTP/1.1 200"), rest[:200]
    assert rest.endswith(b'{"status":"ok"}')


def test_an_error_to_head_has_no_body_either(tiny_model):
    srv = ServerProcess(tiny_model, "--max-body-bytes", "1000")
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
            sock.sendall(b"HEAD /health HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5000\r\n\r\n")
            data = read_until(sock, b"\r\n\r\n")
            sock.settimeout(5)
            while chunk := sock.recv(65536):       # the server closes after the 413's head
                data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 413") and rest == b""
    finally:
        srv.stop()


def test_head_of_a_response_still_running_is_the_head_alone(stored):
    srv, _ = stored
    created = request(srv.port, post_json("/v1/responses", {
        "model": "tiny", "input": "hi", "max_output_tokens": 1500, "background": True, "logit_bias": NO_EOG}))
    assert created.status == 200, created.body
    response_id = created.json()["id"]
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as sock:
            sock.sendall(f"HEAD /v1/responses/{response_id}?stream=true HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
                         + GET_HEALTH)
            data = read_until(sock, b'{"status":"ok"}')
        head, _, rest = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and rest.startswith(b"HTTP/1.1 200"), rest[:200]
    finally:
        request(srv.port, f"POST /v1/responses/{response_id}/cancel HTTP/1.1\r\nHost: localhost\r\n"
                          f"Content-Length: 0\r\n\r\n".encode())


# ---- item 9: OPTIONS *, absolute-form targets, Host syntax ---------------------------------------

def test_options_asterisk_is_204_with_allow(stored):
    srv, _ = stored
    conn = RawConnection(srv.port)
    try:
        conn.send(b"OPTIONS * HTTP/1.1\r\nHost: localhost\r\n\r\n" + GET_HEALTH)
        resp = conn.read_response()
        assert resp.status == 204
        assert {"GET", "HEAD", "POST", "DELETE", "OPTIONS"} <= {m.strip() for m in resp.header("allow").split(",")}
        assert conn.read_response().status == 200          # no stray bytes before the next answer
    finally:
        conn.close()
    assert request(srv.port, b"GET * HTTP/1.1\r\nHost: localhost\r\n\r\n").status == 400


def test_an_absolute_target_s_authority_replaces_host(stored):
    srv, _ = stored
    body = json.dumps({"content": "hi"}).encode()
    evil = request(srv.port, b"POST http://evil.com/tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: "
                   + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert evil.status == 403 and evil.json()["error"]["code"] == "host_not_allowed"
    local = request(srv.port, f"GET http://localhost:{srv.port}/health HTTP/1.1\r\nHost: evil.com\r\n\r\n".encode())
    assert local.status == 200


@pytest.mark.parametrize("host", [b"localhost:80@evil.com", b"localhost:abc", b"local host", b"[::1",
                                  b"localhost:99999999999999999999", b"localhost:65536", b"[::1::2]:8080"])
def test_a_host_that_is_not_host_port_is_400(stored, host):
    srv, _ = stored
    resp = request(srv.port, b"GET /health HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
    assert resp.status == 400 and "Host" in resp.json()["error"]["message"]


def test_userinfo_in_an_absolute_target_is_400(stored):
    srv, _ = stored
    assert request(srv.port, b"GET http://localhost@evil.com/health HTTP/1.1\r\nHost: localhost\r\n\r\n").status == 400


# ---- item 6: silent connections, refusals the client can read ---------------------------------

def test_a_connection_that_sends_nothing_is_closed_after_the_header_timeout(tiny_model):
    srv = ServerProcess(tiny_model, "--header-timeout", "0.5", "--idle-timeout", "120")
    try:
        silent = RawConnection(srv.port)
        assert silent.is_closed(timeout=20)          # by --header-timeout, not --idle-timeout
        conn = RawConnection(srv.port)               # a keep-alive connection still idles on the idle clock
        conn.send(GET_HEALTH)
        assert conn.read_response().status == 200
        assert not conn.is_closed(timeout=1)         # twice the header timeout
        conn.close()
    finally:
        srv.stop()


def open_keep_alive(port: int) -> RawConnection:
    """A connection that got a 200 and stays open (the start-up probe's may not be closed yet)."""
    deadline = time.monotonic() + 10
    while True:
        conn = RawConnection(port)
        conn.send(GET_HEALTH)
        if conn.read_response().status == 200 or time.monotonic() > deadline:
            return conn
        conn.close()
        time.sleep(0.1)


def test_a_refused_connection_reads_its_503_though_it_sent_a_body(tiny_model):
    srv = ServerProcess(tiny_model, "--max-connections", "2", "--header-timeout", "60")
    try:
        held = [open_keep_alive(srv.port) for _ in range(2)]
        payload = post_json("/tokenize", {"content": "x" * 8 * MB})
        for _ in range(3):
            extra = RawConnection(srv.port)
            # as an HTTP client does: the whole request, then the answer; a reset fails the send
            extra.send(payload)
            resp = extra.read_response()
            assert resp.status == 503 and "max-connections" in resp.json()["error"]["message"]
            assert resp.header("retry-after")
            extra.close()
        for conn in held:
            conn.close()
    finally:
        srv.stop()


def test_a_413_reaches_a_client_still_sending_its_body(tiny_model):
    srv = ServerProcess(tiny_model, "--max-body-bytes", "1000")
    try:
        payload = post_json("/tokenize", {"content": "x" * 8 * MB})
        for _ in range(3):
            conn = RawConnection(srv.port)
            conn.send(payload)                     # the server answers 413 at the head and drains the rest
            resp = conn.read_response()
            assert resp.status == 413 and resp.header("connection") == "close"
            conn.close()
    finally:
        srv.stop()


# ---- item 5: the in-flight body budget, memory per request -------------------------------------

def inflight_bytes(port: int) -> int:
    held = re.search(r"^localserve_inflight_body_bytes (\d+)", request(port, GET_METRICS).body.decode(), re.M)
    assert held, "no localserve_inflight_body_bytes in /metrics"
    return int(held[1])


def test_bodies_past_the_inflight_budget_get_503_in_their_dialect(tiny_model):
    srv = ServerProcess(tiny_model, "--max-body-bytes", "100000", "--max-inflight-bytes", "150000")
    try:
        slow = RawConnection(srv.port)             # announces 100,000 bytes and sends 95,000 of them
        slow.send(b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n\r\n" + b" " * 95000)
        deadline = time.monotonic() + 30             # the server has read the 95,000 bytes: they are held
        while inflight_bytes(srv.port) < 95000:
            assert time.monotonic() < deadline, "the slow body's bytes were never read"
            time.sleep(0.05)
        big = {"messages": [{"role": "user", "content": "x" * 60000}], "max_tokens": 1}
        openai_resp = request(srv.port, post_json("/v1/chat/completions", big))
        assert openai_resp.status == 503 and openai_resp.header("retry-after")
        assert "max-inflight-bytes" in openai_resp.json()["error"]["message"]
        anthropic_resp = request(srv.port, post_json("/v1/messages", {**big, "model": "x"}))
        assert anthropic_resp.status == 529 and anthropic_resp.header("retry-after")
        assert anthropic_resp.json()["error"]["type"] == "overloaded_error"
        assert request(srv.port, post_json("/tokenize", {"content": "hi"})).status == 200   # small ones pass
        assert 95000 <= inflight_bytes(srv.port) < 150000       # the slow body (and maybe the last small one)
        assert "localserve_inflight_body_limit_bytes 150000" in request(srv.port, GET_METRICS).body.decode()
        slow.send(b" " * (100000 - 95000))         # the held body ends (and is answered): its bytes free up
        assert slow.read_response().status == 400
        deadline = time.monotonic() + 10           # released once the answer is written, a moment after
        while "localserve_inflight_body_bytes 0" not in request(srv.port, GET_METRICS).body.decode() \
                and time.monotonic() < deadline:
            time.sleep(0.05)
        again = request(srv.port, post_json("/v1/chat/completions", big))
        assert again.status == 400 and again.json()["error"]["code"] == "context_length_exceeded"
    finally:
        srv.stop()


def test_max_inflight_bytes_below_max_body_bytes_is_a_usage_error():
    done = subprocess.run([sys.executable, "-m", "localserve", "--max-body-bytes", "1000",
                           "--max-inflight-bytes", "999"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "--max-inflight-bytes" in done.stderr


def test_a_30_mb_prompt_costs_a_few_times_its_size_and_rss_comes_back(tiny_model):
    srv = ServerProcess(tiny_model, "--no-store")
    try:
        conn = RawConnection(srv.port, timeout=120)
        conn.send(post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                                     "max_tokens": 2}))
        assert conn.read_response().status == 200
        before = memory_bytes(srv.proc.pid)
        body = json.dumps({"messages": [{"role": "user", "content": "a b " * (30 * MB // 4)}],
                           "max_tokens": 2}).encode()
        conn.send(post_json("/v1/chat/completions", body))
        resp = conn.read_response()
        assert resp.status == 400 and resp.json()["error"]["code"] == "context_length_exceeded"
        peak = memory_bytes(srv.proc.pid)["VmHWM"] - before["VmHWM"]
        # the body, its text once parsed, the rendered prompt: a few copies, not 40 (was 1.4 GB)
        assert peak < 5 * len(body), f"peak RSS grew {peak / MB:.0f} MB for a {len(body) / MB:.0f} MB body"
        conn.send(post_json("/tokenize", {"content": "a b " * (30 * MB // 4)}))
        tokenize = conn.read_response()
        assert tokenize.status == 400 and tokenize.json()["error"]["param"] == "content"
        deadline = time.monotonic() + 10
        while memory_bytes(srv.proc.pid)["VmRSS"] > before["VmRSS"] + 16 * MB and time.monotonic() < deadline:
            time.sleep(0.2)
        after = memory_bytes(srv.proc.pid)["VmRSS"]
        assert after <= before["VmRSS"] + 16 * MB, \
            f"RSS {before['VmRSS'] / MB:.0f} MB before, {after / MB:.0f} MB after the big requests"
        conn.close()
    finally:
        srv.stop()


def test_detokenize_takes_at_most_its_limit_of_tokens(stored):
    """5 million tokens (a 15 MB body) took the server past 640 MB: every piece was held, then the
    text, then its JSON (hostile2)."""
    from localserve.dialects.limits import MAX_DETOKENIZE_TOKENS
    srv, _ = stored
    past = request(srv.port, post_json("/detokenize", {"tokens": [5] * (MAX_DETOKENIZE_TOKENS + 1)}), timeout=60)
    assert past.status == 400 and "MAX_DETOKENIZE_TOKENS" in past.json()["error"]["message"]
    at = request(srv.port, post_json("/detokenize", {"tokens": [5] * MAX_DETOKENIZE_TOKENS}), timeout=60)
    assert at.status == 200 and len(at.json()["content"]) >= MAX_DETOKENIZE_TOKENS
