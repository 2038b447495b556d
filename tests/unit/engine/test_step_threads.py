"""/slots and /metrics read a model's threads from one place: the count its last step ran on. The
policy's next count, which a slow step may have moved since, takes hold at the next step."""

from __future__ import annotations

from localserve.engine import threadpool
from localserve.engine.thread_policy import StepCosts
from localserve.engine.threadpool import StepThreads


def test_slots_say_the_count_the_steps_run_on_until_the_next_step_takes_the_policys(monkeypatch):
    monkeypatch.setattr(threadpool, "attach", lambda ctx, n: None)
    applied = []
    monkeypatch.setattr("llama_cpp.llama_cpp.llama_set_n_threads", lambda ctx, n, batch: applied.append(n))
    threads = StepThreads(None, 2, 2)
    threads.measured(StepCosts(one=0.010, row=0.003), adaptive=True)
    for _ in range(50):                          # one core held by another process: slow steps
        if threads.policy.threads == 1:
            break
        threads.policy.observe(1, 0.040)
    assert threads.policy.threads == 1
    assert threads.as_json()["in_use"] == threads.in_use == 2 and applied == []   # no step since
    threads.before_step(2)
    assert threads.as_json()["in_use"] == threads.in_use == 1 and applied == [1]
