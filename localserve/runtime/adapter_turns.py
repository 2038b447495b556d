"""Whose turn it is: the jobs of one LoRA adapter set per decode step.

llama.cpp sets adapters on the whole context, so a batch holding two jobs of different sets
would run one of them under the other's adapters (llama.cpp#10374 is that bug in llama-server).
Each step therefore runs the ready jobs of one set only, and the sets take turns: the set that
has waited longest goes next (since it last ran, or since it was first seen ready: a new set
queues behind those already waiting), so with k sets ready each runs within k steps and none
waits for another to finish. With one set ready (the common
case: no adapters at all) every ready job runs, as before.
"""

from __future__ import annotations

from typing import Sequence

from ..generation import AdapterSet
from .jobs import Job


class AdapterTurns:
    def __init__(self) -> None:
        self.steps = 0
        self.waiting_since: dict[AdapterSet, int] = {}     # each set ready last step: when it last ran, or came

    def pick(self, jobs: Sequence[Job]) -> tuple[AdapterSet, list[Job]]:
        """The set whose turn it is among these ready jobs, and its jobs (in their order)."""
        groups: dict[AdapterSet, list[Job]] = {}
        for job in jobs:
            groups.setdefault(job.request.adapters, []).append(job)
        self.steps += 1
        # a set no job is ready in is forgotten: it queues as new when it comes back
        self.waiting_since = {adapters: self.waiting_since.get(adapters, self.steps) for adapters in groups}
        chosen = min(groups, key=self.waiting_since.__getitem__)
        self.waiting_since[chosen] = self.steps + 1      # behind every set waiting now
        return chosen, groups[chosen]
