"""Threads and drafts on the real engine: the thread count a server decodes on is reported and its
threadpool attached (its workers outlive each decode), and a sampled job whose drafts are refused stops drafting.

How the count adapts is tested on the policy alone, with a machine's step costs fed to it
(tests/unit/engine/test_thread_policy.py), and once on a server beside a spinning process:
that test counts requests until the count moves, never seconds.
"""

from __future__ import annotations

import os
import string
import subprocess
import sys

import pytest

from conftest import ServerProcess, slow_model
from promtext import parse
from procstat import cpu_seconds, live_threads_cpu_seconds
from rawhttp import RawConnection, post_json, request
from tinymodel import NO_EOG, token_ids, tiny_vocab

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


def test_the_decodes_threads_live_as_long_as_the_model(models_dir):
    # Without a persistent pool every llama_decode starts its worker threads and ends them after:
    # their CPU time then belongs to threads that ended (about half of a prefill's on two threads).
    srv = ServerProcess(slow_model(models_dir), "--model-id", "slow", "--ctx-size", "8192", "--slots", "1",
                        "--no-store", threads=2)
    try:
        pid = srv.proc.pid
        ended_before, cpu_before = cpu_seconds(pid) - live_threads_cpu_seconds(pid), cpu_seconds(pid)
        conn = RawConnection(srv.port, timeout=120)
        body = {"prompt": "hello world " * 1500, "max_tokens": 100, "temperature": 0}     # ~3000 tokens of prefill
        conn.send(post_json("/v1/completions", body))
        assert conn.read_response().status == 200
        conn.close()
        ended = cpu_seconds(pid) - live_threads_cpu_seconds(pid) - ended_before
        spent = cpu_seconds(pid) - cpu_before
        assert spent > 0.2 and ended < 0.1 * spent, f"{ended:.2f} s of {spent:.2f} s spent by threads that ended"
    finally:
        srv.stop()


MAX_REQUESTS_TO_ADAPT = 200    # completions of 64 tokens each: thousands of steps, where a few dozen should do


def in_use_within(port: int, wanted, requests: int) -> list[int]:
    """Completions one after another until the threads in use are `wanted(count)`; the counts seen."""
    body = {"prompt": "hello", "max_tokens": 64, "temperature": 0, "logit_bias": NO_EOG}
    seen = []
    for _ in range(requests):
        assert request(port, post_json("/v1/completions", body), timeout=60).status == 200
        seen.append(threads_of(port)[0]["in_use"])
        if wanted(seen[-1]):
            break
    return seen


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: one thread, nothing to adapt")
def test_a_spinning_process_takes_a_thread_away_and_it_comes_back_when_it_stops(models_dir):
    # a model big enough that two threads beat one on a quiet box (the tiny one's steps are all overhead)
    srv = ServerProcess(slow_model(models_dir), "--model-id", "tiny", "--no-store", threads=None)
    most = os.cpu_count()
    spinner = None
    try:
        assert threads_of(srv.port)[0]["adaptive"] is True
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        loaded = in_use_within(srv.port, lambda n: n < most, MAX_REQUESTS_TO_ADAPT)
        assert loaded[-1] < most, f"the count never fell while a core was held: {loaded}"
        spinner.kill()
        spinner.wait()
        spinner = None
        quiet = in_use_within(srv.port, lambda n: n == most, MAX_REQUESTS_TO_ADAPT)
        assert quiet[-1] == most, f"the count never came back once the core was free: {quiet}"
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
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
        # a try accepted by chance earning a few more: 13 to 92 drafted tokens an answer here (this
        # model's sampled letters match a draft now and then: 7 to 12 accepted); drafts that cost
        # nothing (drafting on whatever is refused) came to about 500 an answer
        assert all(drafted > 0 for drafted in sampled) and sum(sampled) <= 300, sampled
        greedy = request(srv.port, post_json("/v1/completions", {**body, "temperature": 0}), timeout=120).json()
        assert greedy["timings"]["draft_n_accepted"] > 300      # the same text, its drafts accepted: on they go
        speculation = request(srv.port, GET_SLOTS).json()["models"]["tiny"]["speculation"]
        assert speculation["drafted"] == sum(sampled) + greedy["timings"]["draft_n"]
        assert 0.1 <= speculation["row_share"] <= 1.0           # a drafted row's price, measured at load
        scrape = parse(request(srv.port, GET_METRICS).body.decode())
        assert scrape.value("localserve_draft_tokens_total") == speculation["drafted"]
    finally:
        srv.stop()
