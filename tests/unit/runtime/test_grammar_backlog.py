"""The grammar backlog (runtime/pending_sample.py): a grammar sample past --sample-time-limit fails
its job but goes on inside llama.cpp, a core busy; once MAX_ABANDONED_SAMPLES of them run, a new
grammar job is refused (GrammarBacklog: the dialects' 503, Retry-After) while a plain job is still
served, and grammar jobs are taken again once one of them returns. The real Runtime, stepped by
hand over the scripted engine of test_runtime_step; each stuck sample is a worker thread blocked
until the test lets it go (as a native call that cannot be interrupted)."""

from __future__ import annotations

import threading
import time

import pytest

from localserve.dialects.failures import GRAMMAR_RETRY_AFTER_SECONDS, refusals
from localserve.errors import ApiError
from localserve.generation import Finished, GrammarBacklog, SamplingParams, SamplingTooSlow
from localserve.runtime.pending_sample import MAX_ABANDONED_SAMPLES, abandoned_running
from localserve.runtime.runtime import Runtime

from .test_runtime_step import ScriptedEngine, ScriptedSampler, drained, request

GRAMMAR = SamplingParams(grammar='root ::= "a"+')
CALL_GRAMMAR = SamplingParams(call_grammar='root ::= "a"+')
WAIT = 10.0                 # seconds a state the runtime reaches at once may take on a loaded box


class StuckSampler(ScriptedSampler):
    """A grammar job's sampler whose every choice stays inside "llama.cpp" until `release` is set."""
    has_grammar = True

    def __init__(self, release: threading.Event):
        super().__init__([10] * 100)
        self.release = release
        self.freed = threading.Event()

    def load(self, row):
        pass

    def choose(self):
        self.release.wait(60)
        return self.tokens.pop(0)

    def free(self):
        self.freed.set()


@pytest.fixture
def stuck():
    """(runtime, the samplers its grammar jobs got); every stuck sample let go at the end, so no
    abandoned sample outlives the test (the count is the process's)."""
    release = threading.Event()
    samplers: list[StuckSampler] = []
    engine = ScriptedEngine(answer=(10, 11, 12))
    plain = engine.new_sampler

    def new_sampler(params: SamplingParams):
        if not (params.grammar or params.call_grammar):
            return plain(params)
        samplers.append(StuckSampler(release))
        return samplers[-1]

    engine.new_sampler = new_sampler
    assert abandoned_running() == 0, "an earlier test left abandoned samples running"
    rt = Runtime(engine, slots=MAX_ABANDONED_SAMPLES + 2, max_queue=8, sample_time_limit=0.01)
    try:
        yield rt, samplers, release
    finally:
        release.set()
        until(lambda: abandoned_running() == 0)


def until(condition, step=None) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "the runtime did not get there"
        if step is not None:
            step()
        else:
            time.sleep(0.01)


def run_to_its_end(rt: Runtime, gen) -> Finished:
    """Step the runtime until gen's job has ended; its Finished event."""
    seen: list = []

    def step():
        rt.step()
        rt.outbox.deliver()
        seen.extend(drained(gen))
    until(lambda: seen and isinstance(seen[-1], Finished), step)
    return seen[-1]


def test_the_backlog_refuses_grammar_jobs_only_and_lets_go_once_a_sample_returns(stuck):
    rt, samplers, release = stuck
    for n in range(MAX_ABANDONED_SAMPLES):
        assert abandoned_running() == n
        gen = rt.submit(request(max_tokens=5, sampling=GRAMMAR))        # taken: fewer than the limit run
        end = run_to_its_end(rt, gen)
        assert isinstance(end.error, SamplingTooSlow), end              # the job failed at the time limit ...
        assert abandoned_running() == n + 1                             # ... its sample still running
        assert not samplers[-1].freed.is_set(), "the sampler was freed under the thread still using it"

    for sampling in (GRAMMAR, CALL_GRAMMAR):        # a schema or a forced call: a grammar all the same
        with pytest.raises(GrammarBacklog):
            rt.submit(request(max_tokens=5, sampling=sampling))
    with pytest.raises(ApiError) as refused:        # as a dialect asks the runtime: the 503 to retry later
        with refusals():
            rt.submit(request(max_tokens=5, sampling=GRAMMAR))
    assert refused.value.status == 503 and refused.value.code == "server_overloaded"
    assert refused.value.headers == [("Retry-After", str(GRAMMAR_RETRY_AFTER_SECONDS))]
    assert len(samplers) == MAX_ABANDONED_SAMPLES, "a refused job got a sampler"

    plain = rt.submit(request(max_tokens=3))        # a job without a grammar is served as ever
    end = run_to_its_end(rt, plain)
    assert end.error is None and end.output.content == "abc" and end.output.finish_reason == "length"

    release.set()                                   # the stuck samples return: each frees its sampler
    until(lambda: abandoned_running() == 0)
    assert all(s.freed.wait(WAIT) for s in samplers)
    again = run_to_its_end(rt, rt.submit(request(max_tokens=5, sampling=GRAMMAR)))     # grammar jobs run again
    assert again.error is None and again.output.content == "aaaaa"

