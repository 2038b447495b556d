"""How many threads the next decode step runs on: all the model may use while the machine gives
them, fewer while another process holds cores.

ggml's threads meet at a barrier after every node of a graph (hundreds per token) and spin
there. When another process holds a core, one of them is now and then descheduled and the
others spin through their time slices waiting for it: on a 2-core box with one core busy, two
threads decode at a quarter of their quiet speed, one thread at over half.

The policy learns from decode steps alone (every token of the batch wants logits: streams'
next tokens and their drafts), whose quiet cost is known: StepCosts, measured at load at the
most threads. A step's seconds over that cost is its slowdown, about 1 on a quiet box. Levels
are means, not medians: under load most steps at two threads take about what one thread
takes, and every few steps one takes five times that (a thread descheduled at a barrier);
those are the cost.
- Down: while the recent slowdown at t threads is over SLOWER times what t threads would cost
  on a quiet box, t-1 threads are tried for a few steps, and kept when they are faster by
  MARGIN; else the count goes back, and the next try down waits twice as long.
- Up: below the most threads, t+1 is tried every so many steps (twice as many after each try
  that was not faster, up to MAX_GAP): so the count comes back once the load goes.
A try is the measure: nothing is assumed of how another count would do.

Pure bookkeeping over (rows, seconds) pairs: tests feed it a machine's step costs. The costs
themselves are measured at load (measure_step_costs), over a timed step the engine hands in.
"""

from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Callable

SAMPLES = 8            # a count's level: the mean of its latest steps' slowdowns (a mean: the spikes are the cost)
TRIAL_STEPS = 6        # steps a try lasts (a try up under load costs these at the slow count)
SLOWER = 1.5           # a level this many times the count's quiet cost starts a try with one thread less
MARGIN = 0.05          # a try is kept when its level is under the other count's by this fraction
FIRST_GAP = 8          # steps at a count before it is tried against another (doubled after each failed try)
MAX_GAP = 128          # the most steps between two tries: the longest a count stays down after the load goes
MIN_ROW_SHARE = 0.1    # a logits row costs at least this share of a step (its sampling, on the runtime thread)
STEP_COST_ROUNDS = (2, 20)     # each decode shape is timed at load this many times at least, at most ...
STEP_COST_SECONDS = 0.05       # ... until this long is spent (a tiny model's steps are noise-sized); the fastest counts


@dataclass
class StepCosts:
    """This box's quiet cost of a decode step at the most threads: one token, and each row more."""
    one: float           # seconds for a step of one token with logits
    row: float           # seconds each further token with logits adds

    def expected(self, rows: int) -> float:
        return self.one + self.row * (rows - 1)

    @property
    def row_share(self) -> float:
        """A drafted token's cost as a share of a one-token step (speculative.py weighs drafts by it)."""
        return min(1.0, max(MIN_ROW_SHARE, self.row / self.one)) if self.one > 0 else 1.0


def measure_step_costs(timed_step: Callable[[int], float], rows: int) -> StepCosts:
    """A quiet box's step costs: `timed_step(n)` decodes a step of n tokens with logits (and clears
    it) and says how long it took; a step of one and one of `rows`, the fastest of each counting."""
    one = many = float("inf")
    started = time.perf_counter()
    least, most = STEP_COST_ROUNDS
    for done in range(most):
        if done >= least and time.perf_counter() - started >= STEP_COST_SECONDS:
            break
        one = min(one, timed_step(1))
        if rows > 1:
            many = min(many, timed_step(rows))
    return StepCosts(one, max(0.0, (many - one) / (rows - 1)) if rows > 1 else one)


class ThreadPolicy:
    """The thread count of the next step, adapted to what the machine gives (unless pinned)."""

    def __init__(self, most: int, costs: StepCosts | None, adaptive: bool = True):
        self.most = max(1, most)
        self.threads = self.most
        self.costs = costs
        self.adaptive = adaptive and costs is not None and self.most > 1
        self._recent: deque[float] = deque(maxlen=SAMPLES)
        self._trial: tuple[int, float] | None = None     # the count tried against, and its level
        self._steps = 0                                  # steps at this count since it was chosen
        self._gaps = {-1: FIRST_GAP, 1: FIRST_GAP}       # steps before the next try down (-1) or up (+1)

    def limit(self, most: int) -> None:
        """The most threads the model may use now (models busy at once share the cores)."""
        most = max(1, most)
        if most == self.most:
            return
        self.most = most
        self._trial = None
        if not self.adaptive or self.threads > most:
            self._switch(most)

    def observe(self, rows: int, seconds: float) -> None:
        """A decode step of `rows` tokens, every one with logits, took `seconds`."""
        if not self.adaptive or rows < 1:
            return
        if self.threads == self.most and rows == 1:
            self.costs.one = min(self.costs.one, seconds)    # a calmer step than the load-time measure
        self._recent.append(seconds / self.costs.expected(rows))
        self._steps += 1
        if self._trial is not None:
            if self._steps >= TRIAL_STEPS:
                self._judge(statistics.fmean(self._recent))
            return
        if len(self._recent) < SAMPLES:
            return
        level = statistics.fmean(self._recent)
        if self.threads > 1 and self._steps >= self._gaps[-1] and level > SLOWER * self.most / self.threads:
            self._try(self.threads - 1, level)
        elif self.threads < self.most and self._steps >= self._gaps[1]:
            self._try(self.threads + 1, level)

    def _try(self, threads: int, level: float) -> None:
        self._trial = (self.threads, level)
        self._switch(threads)

    def _judge(self, level: float) -> None:
        before, before_level = self._trial
        self._trial = None
        direction = 1 if self.threads > before else -1
        if level < before_level * (1 - MARGIN):
            self._gaps = {-1: FIRST_GAP, 1: FIRST_GAP}
            self._steps = 0         # kept: the next try waits its gap from here
            return
        self._gaps[direction] = min(MAX_GAP, self._gaps[direction] * 2)
        self._switch(before)

    def _switch(self, threads: int) -> None:
        self.threads = threads
        self._steps = 0
        self._recent.clear()

    def as_json(self) -> dict:
        return {"in_use": self.threads, "most": self.most, "adaptive": self.adaptive}
