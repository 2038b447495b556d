"""One LoRA adapter set per decode step (runtime/adapter_turns.py): jobs of different sets never
share a batch, the engine runs each batch under its jobs' set, and the sets take turns (a set
that keeps being ready is never starved by others coming and going). The real engine runs
this in tests/e2e/test_lora.py."""

from __future__ import annotations

from types import SimpleNamespace

from localserve.runtime.adapter_turns import AdapterTurns
from localserve.runtime.runtime import Runtime

from .test_runtime_step import ScriptedEngine, request

A, B, C = ((0, 1.0),), ((1, 1.0),), ((0, 0.5),)


def job(adapters):
    return SimpleNamespace(request=SimpleNamespace(adapters=adapters))


def test_one_set_runs_all_its_jobs_each_step():
    jobs = [job(()), job(()), job(())]
    assert AdapterTurns().pick(jobs) == ((), jobs)


def test_sets_take_turns_in_the_order_they_came():
    turns = AdapterTurns()
    a, b, c = job(A), job(B), job(C)
    picked = [turns.pick([a, b, c])[0] for _ in range(6)]
    assert picked == [A, B, C, A, B, C]


def test_a_set_always_ready_is_not_starved_by_sets_coming_and_going():
    turns = AdapterTurns()
    steady, first, second = job(B), job(A), job(C)
    runs = []
    for step in range(12):          # A and C alternate being ready, each placed before B
        coming = first if step % 2 == 0 else second
        runs.append(turns.pick([coming, steady])[0])
    assert max(len(gap) for gap in "".join("b" if r == B else "x" for r in runs).split("b")) <= 2
    assert runs.count(B) >= 4


def test_a_batch_never_mixes_adapter_sets_and_runs_under_its_own():
    engine = ScriptedEngine(answer=(10, 11, 12) * 10)
    rt = Runtime(engine, slots=3, max_queue=4)
    gens = [rt.submit(request(max_tokens=4, adapters=adapters)) for adapters in (A, (), A)]
    for _ in range(20):
        rt.step()
    seq_sets = {0: A, 1: (), 2: A}          # each job takes the next free slot
    for batch, adapters in zip(engine.batches, engine.adapter_sets):
        assert {seq_sets[seq_id] for _, _, seq_id, _ in batch} == {adapters}
    assert set(engine.adapter_sets) == {A, ()}
    rt.outbox.deliver()
    assert all(gen.events.qsize() for gen in gens)
