"""Threads and drafts on the real engine: the thread count a server decodes on is reported and its
threadpool attached, and a sampled job whose drafts are refused stops drafting.

How the count adapts to a busy machine is tested on the policy alone, with a machine's step
costs fed to it (tests/unit/engine/test_thread_policy.py): a spinner beside a test server
would make a timed test of it.
"""

from __future__ import annotations

import os
import string

import pytest

from conftest import ServerProcess
from promtext import parse
from rawhttp import post_json, request
from tinymodel import token_ids, tiny_vocab

GET_SLOTS = b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n"
GET_METRICS = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"


def threads_of(port: int) -> tuple[dict, float]:
    """The model's threads in /slots, and the threads /metrics says are in use."""
    slots = request(port, GET_SLOTS).json()
    scrape = parse(request(port, GET_METRICS).body.decode())
    threads = slots["models"]["tiny"]["threads"]
    assert slots["threads"] == threads["in_use"] == scrape.value("localserve_threads")
    assert scrape.value("localserve_model_threads", model="tiny") == threads["in_use"]
    return threads, scrape.value("localserve_threads")


@pytest.mark.parametrize("flags, threads, adaptive", [
    ((), None, True),                                   # the default: all cores, fewer under load
    ((), 1, False),                                     # --threads pins the count
    (("--no-thread-adaptation",), None, False),
])
def test_the_threads_in_use_are_reported_and_a_persistent_pool_holds_them(tiny_model, flags, threads, adaptive):
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--no-store", *flags, threads=threads)
    try:
        body = {"prompt": "hello", "max_tokens": 20, "temperature": 0}
        assert request(srv.port, post_json("/v1/completions", body), timeout=60).status == 200
        found, in_use = threads_of(srv.port)
        most = threads or os.cpu_count()
        assert found["most"] == found["pool"] == most      # a worker for each thread it may use, kept
        assert found["adaptive"] is (adaptive and most > 1)
        assert 1 <= in_use <= most
        if not found["adaptive"]:
            assert in_use == most
    finally:
        srv.stop()


def test_a_sampled_job_whose_drafts_are_refused_stops_drafting(tiny_model):
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--speculative", "ngram", "--draft-max", "8",
                        "--no-store", "--slots", "1")
    try:
        # 62 one-character tokens allowed, a prompt that repeats them: the lookup always finds a
        # draft, and a sampled token at temperature 2 seldom equals it
        ids = token_ids()
        letters = string.ascii_letters + string.digits
        allowed = {ids[c] for c in letters}
        bias = {str(i): -100 for i in range(len(tiny_vocab())) if i not in allowed}
        body = {"prompt": " ".join(letters) * 4, "max_tokens": 1000, "logit_bias": bias}
        sampled = []
        for seed in (1, 2, 3):
            answer = request(srv.port, post_json("/v1/completions", {**body, "temperature": 2.0, "seed": seed}),
                             timeout=120).json()
            assert answer["usage"]["completion_tokens"] == 1000
            sampled.append(answer["timings"]["draft_n"])
        # a first draft or two, then one token now and then, ever more rarely (runtime/draft_budget.py),
        # a try accepted by chance earning a few more: 10 to 37 drafted tokens an answer here; drafting
        # on, each refused draft halving the next and pausing at most 32 steps, came to 65-126
        assert all(drafted > 0 for drafted in sampled) and sum(sampled) <= 90, sampled
        greedy = request(srv.port, post_json("/v1/completions", {**body, "temperature": 0}), timeout=120).json()
        assert greedy["timings"]["draft_n_accepted"] > 300      # the same text, its drafts accepted: on they go
        speculation = request(srv.port, GET_SLOTS).json()["models"]["tiny"]["speculation"]
        assert speculation["drafted"] == sum(sampled) + greedy["timings"]["draft_n"]
        assert 0.1 <= speculation["row_share"] <= 1.0           # a drafted row's price, measured at load
        scrape = parse(request(srv.port, GET_METRICS).body.decode())
        assert scrape.value("localserve_draft_tokens_total") == speculation["drafted"]
    finally:
        srv.stop()
