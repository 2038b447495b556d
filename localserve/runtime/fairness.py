"""Editor priority, shared out fairly: whom an editor completion may still go before (preempt.py
asks before it parks a job or takes a free slot others wait for).

A completion goes before a job when it parks it, or takes a free slot the job was waiting for
(parked, or queued ahead of it). Each time is a preemption of that job, counted by the
completion's client (GenerationRequest.client). A job is due once completions went before it
MAX_PREEMPTIONS_PER_JOB times, or once it has waited MAX_PREEMPTED_SECONDS (parked, or queued
since a completion first went before it): from then on it takes the next free slot before any
completion and is not parked again until it ends. One client alone may make at most
CLIENT_PREEMPTION_SHARE of those preemptions: past it, its completions wait for that job. So
a flood of completions (a new client id each time) holds a chat back for a bounded number of
completions, and one editor alone for half as many.

The counts live with the job's handle and go when it does (a weak table): nothing here has to be
told that a job ended.
"""

from __future__ import annotations

import collections
import weakref
from collections.abc import Iterable

from ..generation import ActiveGeneration

# How many times editor completions may go before one job (park it, or take the slot it waits
# for); then it runs to its end. With --slots 1 a real model's completion takes a second or two:
# about ten seconds of delay, as the time limit below.
MAX_PREEMPTIONS_PER_JOB = 8
# The most one job may wait for editor completions, parked (or queued once one went before it).
MAX_PREEMPTED_SECONDS = 10.0
# The share of a job's preemptions one client may make: two editors (or an editor and a script)
# each get half, and a single editor typing on cannot hold a chat back for all eight.
CLIENT_PREEMPTION_SHARE = 0.5
MAX_PREEMPTIONS_PER_CLIENT = max(1, int(MAX_PREEMPTIONS_PER_JOB * CLIENT_PREEMPTION_SHARE))


def client_of(gen: ActiveGeneration) -> str:
    """Whom an editor completion counts for: its client, else itself alone (a request that names
    no client shares nothing with another)."""
    return gen.request.client or f"job {gen.id}"


class Fairness:
    """How often editor completions went before each job, by client, and since when."""

    def __init__(self) -> None:
        self._passes: weakref.WeakKeyDictionary[ActiveGeneration, collections.Counter[str]] = \
            weakref.WeakKeyDictionary()
        self._first: weakref.WeakKeyDictionary[ActiveGeneration, float] = weakref.WeakKeyDictionary()

    def due(self, job: ActiveGeneration, waited: float) -> bool:
        """No completion may go before this job any more; `waited`: its seconds parked (or queued
        since a completion first went before it)."""
        passes = self._passes.get(job)
        return (passes is not None and passes.total() >= MAX_PREEMPTIONS_PER_JOB) or waited >= MAX_PREEMPTED_SECONDS

    def may_pass(self, job: ActiveGeneration, client: str, waited: float) -> bool:
        """Whether a completion from `client` may still go before this job."""
        passes = self._passes.get(job)
        return not self.due(job, waited) and (passes is None or passes[client] < MAX_PREEMPTIONS_PER_CLIENT)

    def passed(self, jobs: Iterable[ActiveGeneration], client: str, now: float) -> None:
        """A completion from `client` went before each of these jobs at `now`."""
        for job in jobs:
            self._passes.setdefault(job, collections.Counter())[client] += 1
            self._first.setdefault(job, now)

    def queued_since(self, job: ActiveGeneration, now: float) -> float:
        """Seconds since a completion first went before this queued job (0: none has)."""
        first = self._first.get(job)
        return 0.0 if first is None else now - first

    def preemptions(self, job: ActiveGeneration) -> int:
        """How many times completions went before it (/slots)."""
        passes = self._passes.get(job)
        return 0 if passes is None else passes.total()
