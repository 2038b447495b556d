"""The thread count follows what the machine gives: fewer threads while another process holds a
core, all of them again once it goes. A machine model gives each step's seconds."""

from __future__ import annotations

from localserve.engine.thread_policy import MAX_GAP, StepCosts, ThreadPolicy

QUIET = {2: 0.010, 1: 0.016}          # seconds per one-token step on a quiet 2-core box
SPINNER = {2: 0.040, 1: 0.017}        # one core held by another process: two threads spin at barriers


def run(policy: ThreadPolicy, machine: dict[int, float], steps: int, rows: int = 1) -> list[int]:
    counts = []
    for _ in range(steps):
        counts.append(policy.threads)
        policy.observe(rows, machine[policy.threads] * (1 + 0.3 * (rows - 1)))
    return counts


def policy(**kwargs) -> ThreadPolicy:
    return ThreadPolicy(2, StepCosts(one=0.010, row=0.003), **kwargs)


def test_a_busy_core_takes_a_thread_away_and_it_comes_back_when_the_load_goes():
    adaptive = policy()
    assert set(run(adaptive, QUIET, 500)) == {2}                   # quiet: never a thread less
    loaded = run(adaptive, SPINNER, 2000)
    assert loaded[-1] == 1 and loaded.index(1) < 20               # down within a few steps
    assert loaded[100:].count(2) < 0.05 * len(loaded[100:])       # tries up are rare under the load
    back = run(adaptive, QUIET, 3 * MAX_GAP)
    assert back[-1] == 2 and back[-MAX_GAP:].count(1) == 0        # up again once it goes, and stays


def test_steps_of_several_rows_are_weighed_by_their_quiet_cost():
    adaptive = policy()
    assert set(run(adaptive, QUIET, 300, rows=5)) == {2}          # slower steps, but as slow as they should be
    assert run(adaptive, SPINNER, 300, rows=5)[-1] == 1


def test_a_pinned_count_never_moves_and_the_share_of_busy_models_caps_it():
    pinned = policy(adaptive=False)
    assert set(run(pinned, SPINNER, 300)) == {2}
    adaptive = policy()
    adaptive.limit(1)                                             # another model is busy too
    assert set(run(adaptive, QUIET, 50)) == {1}
    adaptive.limit(2)
    assert run(adaptive, QUIET, 100)[-1] == 2
    assert adaptive.as_json() == {"in_use": 2, "most": 2, "adaptive": True}


def test_costs_measured_on_a_busy_machine_come_down_to_the_quiet_steps_of_their_shapes():
    costs = StepCosts(one=0.020, row=0.019, rows=17)           # the load met a busy machine
    pinned = ThreadPolicy(2, costs, adaptive=False)
    pinned.observe(17, 0.010 + 16 * 0.004)                      # a quiet step of the measured shape
    assert abs(costs.row - (0.074 - 0.020) / 16) < 1e-9        # beside the one-token step measured
    pinned.observe(1, 0.010)
    assert costs.one == 0.010 and abs(costs.expected(17) - 0.074) < 1e-9     # the measured shape's cost kept
    assert abs(costs.row_share - 0.4) < 1e-9
    for rows, seconds in ((1, 0.5), (17, 0.9), (5, 0.030)):     # slower steps, and a few rows dearer than the line
        pinned.observe(rows, seconds)
    assert costs.one == 0.010 and abs(costs.row_share - 0.4) < 1e-9
    pinned.observe(3, 0.010 + 2 * 0.002)                        # a short draft's step under the line: it was high
    assert abs(costs.row_share - 0.2) < 1e-9
