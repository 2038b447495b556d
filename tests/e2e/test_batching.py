"""Several sequences in one decode batch, the multi-conversation prompt cache, and leaks."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import ServerProcess
from rawhttp import RawConnection, run_concurrently, chat_text, post_json, request, request_id_of
from tinymodel import NO_EOG

PROMPTS = ["alpha beta gamma", "the quick brown fox", "one two three four", "hello there world"]


@pytest.fixture(scope="module")
def batch_server(tiny_model):
    srv = ServerProcess(tiny_model, "--slots", "4", "--cache-ram", "64", "--no-store")
    yield srv
    srv.stop()


def greedy(port: int, prompt: str, max_tokens: int = 40, stream: bool = False) -> str:
    body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
            "logit_bias": NO_EOG, "stream": stream}
    resp = request(port, post_json("/v1/chat/completions", body), timeout=60)
    assert resp.status == 200, resp.body
    return chat_text(resp)


def slots(port: int) -> dict:
    return request(port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()


def test_four_concurrent_greedy_requests_match_their_solo_runs(batch_server):
    port = batch_server.port
    alone = [greedy(port, p) for p in PROMPTS]
    together = run_concurrently(greedy, [(port, p, 40, i % 2 == 1) for i, p in enumerate(PROMPTS)])
    assert all(alone) and len(set(alone)) > 1       # real, different texts: "" == "" proves nothing
    assert together == alone


def test_each_job_keeps_its_own_grammar(batch_server):
    bodies = [{"messages": [{"role": "user", "content": "x"}], "grammar": f'root ::= "answer {i}"',
               "temperature": 0.9, "seed": i} for i in range(4)]
    results = run_concurrently(lambda b: request(batch_server.port, post_json("/v1/chat/completions", b)).json(),
                               [(b,) for b in bodies])
    assert [r["choices"][0]["message"]["content"] for r in results] == [f"answer {i}" for i in range(4)]


def test_cancelling_one_of_four_leaves_the_others_unchanged(batch_server):
    port = batch_server.port
    alone = [greedy(port, p, 60) for p in PROMPTS[:3]]
    dropped = RawConnection(port)
    dropped.send(post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPTS[3]}],
                                                    "max_tokens": 3000, "logit_bias": NO_EOG, "stream": True}))
    dropped_id = request_id_of(dropped.sock.recv(4096))

    def drop_soon():
        time.sleep(0.05)
        dropped.close()

    threading.Thread(target=drop_soon).start()
    together = run_concurrently(greedy, [(port, p, 60) for p in PROMPTS[:3]])
    assert all(alone)
    assert together == alone
    assert batch_server.wait_cancelled(dropped_id, "client went away during the stream")


def test_ram_cache_restores_a_returning_conversation(tiny_model):
    srv = ServerProcess(tiny_model, "--slots", "1", "--cache-ram", "64", "--no-store")
    try:
        long_a = "conversation A " * 20
        long_b = "something else entirely " * 20

        def cached(prompt):
            body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 2}
            return request(srv.port, post_json("/v1/chat/completions", body)).json()["usage"][
                "prompt_tokens_details"]["cached_tokens"]

        assert cached(long_a) == 0
        assert cached(long_b) < 10           # only the template prefix; A leaves the slot for RAM
        assert slots(srv.port)["ram_cache"]["entries"] == 1
        assert cached(long_a) > 20           # restored from RAM, not prefilled again
        assert slots(srv.port)["ram_cache"]["hits"] == 1
    finally:
        srv.stop()


def test_a_storm_of_disconnects_leaks_nothing(batch_server):
    port = batch_server.port
    for round_ in range(3):
        conns = []
        for i in range(12):
            conn = RawConnection(port)
            conn.send(post_json("/v1/chat/completions", {
                "messages": [{"role": "user", "content": f"storm {round_} {i}"}], "max_tokens": 2000,
                "logit_bias": NO_EOG, "stream": i % 2 == 0}))
            conns.append(conn)
        time.sleep(0.2)
        for conn in conns:
            conn.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        state = slots(port)
        if not any(s["busy"] for s in state["slots"]) and state["queue_depth"] == 0:
            break
        time.sleep(0.1)
    assert not any(s["busy"] for s in state["slots"]) and state["queue_depth"] == 0
    assert state["ram_cache"]["bytes"] <= state["ram_cache"]["limit_bytes"]
    assert greedy(port, "still serving", 5)
