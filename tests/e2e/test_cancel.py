"""Cancellation when the client goes away, and a full queue (keepalives: test_stream_keepalive.py).

These need a prompt that takes seconds to prefill, so they use a larger random
model (a few MB) and a prompt of a few thousand tokens.
"""

from __future__ import annotations

import threading
import time

import pytest

from conftest import ServerProcess, slow_model
from promtext import parse
from rawhttp import RawConnection, post_json, request, request_id_of
from tinymodel import NO_EOG

LONG_PROMPT = "hello world " * 1500          # ~3000 tokens: seconds of prefill on this model
PREFILL_PROMPT = "hello world " * 3900       # ~7800 tokens: as long as the 8192-token context allows


@pytest.fixture(scope="module")
def slow_server(models_dir):
    srv = ServerProcess(slow_model(models_dir), "--model-id", "slow", "--ctx-size", "8192", "--prefill-keepalive", "0.2", "--slots", "1",
                        "--max-queue", "1")
    yield srv
    srv.stop()


def quick_request(port: int) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert request(port, post_json("/v1/chat/completions", body), timeout=30).status == 200


def scrape(port: int):
    return parse(request(port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").body.decode())


def scrape_until(port: int, done, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(port)
        if done(m):
            return m
        assert time.monotonic() < deadline, "the server never reached the state waited for"
        time.sleep(0.05)


def ended(m, reason: str) -> float:
    return m.value("localserve_generations_total", finish_reason=reason)


def assert_cancelled_and_free(port: int, before, n: int = 1) -> None:
    """n more jobs were cancelled since the scrape before, none ran to its max_tokens, the runtime
    is idle and answers: state, not a stopwatch (an uncancelled 4000-token job ends as length)."""
    after = scrape_until(port, lambda m: ended(m, "cancelled") - ended(before, "cancelled") >= n
                         and m.value("localserve_slots_busy") == 0 and m.value("localserve_queue_depth") == 0)
    assert ended(after, "cancelled") - ended(before, "cancelled") == n
    assert ended(after, "length") == ended(before, "length")
    quick_request(port)


def long_generation(stream: bool, prompt: str = "hi", max_tokens: int = 4000) -> bytes:
    return post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}],
                                              "max_tokens": max_tokens, "stream": stream, "logit_bias": NO_EOG})


def test_non_streaming_client_that_leaves_cancels_its_job(slow_server):
    before = scrape(slow_server.port)
    conn = RawConnection(slow_server.port)
    conn.send(long_generation(False))
    scrape_until(slow_server.port, lambda m: m.value("localserve_slots_busy") == 1)
    time.sleep(0.3)
    conn.close()
    assert_cancelled_and_free(slow_server.port, before)
    assert "client closed the connection while waiting" in slow_server.log


def test_stream_dropped_midway_cancels_its_job(slow_server):
    before = scrape(slow_server.port)
    conn = RawConnection(slow_server.port)
    conn.send(long_generation(True))
    received = b""
    while received.count(b"data: {") < 5:
        received += conn.sock.recv(4096)
    conn.close()
    assert_cancelled_and_free(slow_server.port, before)
    assert slow_server.wait_cancelled(request_id_of(received), "client went away during the stream")


@pytest.mark.parametrize("stream", [False, True])
def test_drop_during_long_prefill_stops_the_prefill(models_dir, stream):
    # --batch-size takes the whole prompt in one llama_decode call: only the abort callback can stop
    # it midway. A job whose prefill is not cancelled samples its one token and ends as "length";
    # one cancelled only once its prefill is done says so in its "cancelled job" line.
    srv = ServerProcess(slow_model(models_dir), "--model-id", "slow", "--ctx-size", "8192", "--slots", "1",
                        "--batch-size", "8192", "--no-store")
    try:
        before = scrape(srv.port)
        conn = RawConnection(srv.port)
        conn.send(long_generation(stream, PREFILL_PROMPT, max_tokens=1))
        scrape_until(srv.port, lambda m: m.value("localserve_slots_busy") == 1)     # admitted: prefilling
        conn.close()
        finished = lambda m: ended(m, "cancelled") + ended(m, "length")     # noqa: E731
        after = scrape_until(srv.port, lambda m: m.value("localserve_slots_busy") == 0
                             and finished(m) > finished(before))
        assert ended(after, "cancelled") - ended(before, "cancelled") == 1
        assert ended(after, "length") == ended(before, "length"), "the prefill ran to its end"
        assert after.value("localserve_generated_tokens_total") == 0
        # The one decode call was cut short: none of the prompt counts as run through the model
        # (a cancel seen only after the call would leave the whole prompt counted here).
        assert after.value("localserve_prefilled_tokens_total") == before.value("localserve_prefilled_tokens_total")
    finally:
        srv.stop()


def test_full_queue_is_503_with_retry_after(slow_server):
    running = RawConnection(slow_server.port)
    running.send(long_generation(True))
    running.sock.recv(4096)                       # the stream has started: the slot is busy
    queued = RawConnection(slow_server.port)
    queued.send(long_generation(True))            # waits for the slot: the queue (size 1) is full
    scrape_until(slow_server.port, lambda m: m.value("localserve_queue_depth") == 1)
    resp = request(slow_server.port, long_generation(False))
    assert resp.status == 503 and resp.header("retry-after")
    assert resp.json()["error"]["message"]
    before = scrape(slow_server.port)
    running.close()
    queued.close()
    assert_cancelled_and_free(slow_server.port, before, n=2)


def test_a_grammar_that_never_ends_stops_at_max_tokens(slow_server):
    resp = request(slow_server.port, post_json("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "grammar": "root ::= [a-z]+", "max_tokens": 5,
        "logit_bias": NO_EOG}))
    choice = resp.json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"].isalpha() and choice["message"]["content"].islower()
    quick_request(slow_server.port)


def test_generation_reaching_the_end_of_context_is_length(tiny_model):
    srv = ServerProcess(tiny_model, "--ctx-size", "64")
    try:
        resp = request(srv.port, long_generation(False, "hi", max_tokens=1000))
        body = resp.json()
        # llama.cpp rounds the context up (to 256 here); the API reports what it really is
        n_ctx = request(srv.port, b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n").json()["data"][0]["meta"]["n_ctx"]
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] == n_ctx
    finally:
        srv.stop()


def test_concurrent_clients_all_get_answers(slow_server):
    results = []

    def one():
        quick_request(slow_server.port)
        results.append(True)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 2
