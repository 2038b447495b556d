"""Which jobs run in the next step, and how: the waiting queue, admission into free slots, slot
choice (prompt_cache_key affinity, prefix reuse), the batch plan with chunked prefill, and which
jobs a cancel ends. Plain bookkeeping over Slots and Jobs: it calls no llama.cpp, so its rules
are tested alone (tests/unit/runtime/test_scheduler.py).
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass, field
from typing import Callable

from ..generation import ActiveGeneration, QueueFull, RuntimeStopped
from .jobs import Job, JobStatus, Slot
from .promptcache import common_prefix

# While other jobs are decoding, a prompt is fed in chunks this large so their
# streams keep moving; alone, a prompt is fed n_batch tokens at a time.
SHARED_PREFILL_CHUNK = 128
# A job reuses a slot's cached sequence when their shared prefix covers at least
# this much of it (llama-server's --slot-prompt-similarity plays the same role).
SLOT_REUSE_FRACTION = 0.5




@dataclass
class Row:
    """One job's share of a batch: how many of its tokens, and the logits row to sample (or None).

    A decoding job's row may carry a draft: the tokens decoded after its next token, each with
    logits (rows logits_row + 1 ...), verified when sampled (speculative.py). n_tokens counts
    only the next token: the draft's tokens join the sequence as they are accepted."""
    job: Job
    logits_row: int | None
    n_tokens: int
    draft: list[int] = field(default_factory=list)


@dataclass
class BatchPlan:
    """One llama_decode: (token, position, seq_id, want_logits) entries and each job's row."""
    jobs: list[Job]             # the step's runnable jobs: in the batch, or waiting for room in it
    entries: list[tuple[int, int, int, bool]] = field(default_factory=list)
    rows: list[Row] = field(default_factory=list)
    prefill_jobs: list[Job] = field(default_factory=list)

    def abort_check(self) -> Callable[[], bool] | None:
        """A prompt chunk is the long part of a step: a cancel of its job stops the decode."""
        prefill_jobs = self.prefill_jobs
        return (lambda: any(j.gen.cancelled for j in prefill_jobs)) if prefill_jobs else None


class Scheduler:
    def __init__(self, slots: int, max_queue: int):
        self.slots = [Slot(i) for i in range(slots)]
        self.max_queue = max_queue
        self.waiting: collections.deque[ActiveGeneration] = collections.deque()
        self.cond = threading.Condition()     # guards waiting and stopping; wakes the runtime
        self.stopping = False

    # ---- the queue (connection threads) -------------------------------------------------

    def enqueue(self, gen: ActiveGeneration) -> None:
        with self.cond:
            if self.stopping:
                raise RuntimeStopped()
            free = sum(1 for s in self.slots if s.job is None)   # these take a waiting job at once
            if len(self.waiting) - free >= self.max_queue:
                raise QueueFull()
            self.waiting.append(gen)
            self.cond.notify()

    def take_all_waiting(self) -> list[ActiveGeneration]:
        with self.cond:
            stranded, self.waiting = list(self.waiting), collections.deque()
        return stranded

    # ---- admission (the runtime thread) ---------------------------------------------------

    def active(self) -> list[Job]:
        return [s.job for s in self.slots if s.job is not None]

    def drop_cancelled_waiting(self) -> list[ActiveGeneration]:
        """Jobs whose clients left while queued give their places back now, not when a slot frees."""
        with self.cond:
            if not any(gen.cancelled for gen in self.waiting):
                return []
            dropped = [gen for gen in self.waiting if gen.cancelled]
            kept = [gen for gen in self.waiting if not gen.cancelled]
            self.waiting.clear()
            self.waiting.extend(kept)
        return dropped

    def next_admission(self) -> tuple[ActiveGeneration, Slot | None] | None:
        """The next waiting job and the free slot it takes (None for a cancelled one); None when
        nothing waits or no slot is free."""
        with self.cond:
            free = [s for s in self.slots if s.job is None]
            if not free or not self.waiting:
                return None
            gen = self.waiting.popleft()
        if gen.cancelled:
            return gen, None
        return gen, choose_slot(free, gen.request.prompt_tokens, gen.request.cache_key)

    def first_waiting(self, wanted: Callable[[ActiveGeneration], bool]) -> ActiveGeneration | None:
        """The first waiting job `wanted` picks, to admit out of its turn (an editor completion: preempt.py)."""
        with self.cond:
            return next((gen for gen in self.waiting if wanted(gen)), None)

    def withdraw(self, gen: ActiveGeneration) -> None:
        with self.cond:
            self.waiting.remove(gen)

    # ---- the step ----------------------------------------------------------------------

    def cancelled(self) -> list[Job]:
        """Running jobs whose clients left: ended before the step runs."""
        return [job for job in self.active() if job.gen.cancelled]

    def runnable(self) -> list[Job]:
        """Jobs that take part in the next batch: all but those waiting on a grammar sample."""
        return [job for job in self.active() if job.pending is None]

    def plan(self, jobs: list[Job], n_batch: int, drafts: dict[int, list[int]] | None = None) -> BatchPlan:
        return plan_batch(jobs, n_batch, drafts)


def draft_room(jobs: list[Job], n_batch: int) -> int:
    """Batch entries left for drafts once every decoding job's token and this step's prompt chunks
    have theirs: a step full of prefill has none (a draft there would only slow the prompts)."""
    decoding = sum(1 for j in jobs if j.status is JobStatus.DECODING)
    chunk_limit = SHARED_PREFILL_CHUNK if decoding else n_batch
    prefill = sum(min(j.text_left, chunk_limit) for j in jobs if j.prefilling)
    return n_batch - decoding - prefill


def choose_slot(free: list[Slot], prompt: list[int], key: str | None = None) -> Slot:
    """The free slot this prompt continues; else an empty one; else the least recently used.

    A slot counts as continued when the shared prefix covers most of what it holds:
    reusing a slot for a few shared template tokens would throw away another
    conversation's cache for nothing. A prompt_cache_key names the conversation outright:
    the slot its last request used is taken whenever the prefix shares anything (an agent
    that rewrote or compacted its history keeps what still matches).
    """
    shared = {s.seq_id: common_prefix(s.tokens, prompt) for s in free}
    keyed = [s for s in free if key is not None and s.cache_key == key and shared[s.seq_id] > 0]
    if keyed:
        return max(keyed, key=lambda s: shared[s.seq_id])
    continued = [s for s in free if s.tokens and shared[s.seq_id] >= SLOT_REUSE_FRACTION * len(s.tokens)]
    if continued:
        return max(continued, key=lambda s: shared[s.seq_id])
    empty = [s for s in free if not s.tokens]
    if empty:
        return empty[0]
    return min(free, key=lambda s: s.last_used)


def plan_batch(jobs: list[Job], n_batch: int, drafts: dict[int, list[int]] | None = None) -> BatchPlan:
    """One batch: a token (and its draft) per decoding job, then prompt chunks within the batch budget."""
    plan = BatchPlan(list(jobs))
    decoding = [j for j in jobs if j.status is JobStatus.DECODING]
    for job in decoding:
        draft = drafts.get(id(job), []) if drafts else []
        plan.rows.append(Row(job, len(plan.entries), 1, draft))
        at = job.position(job.n_past)
        plan.entries.append((job.next_token, at, job.slot.seq_id, True))
        for i, token in enumerate(draft, start=1):
            plan.entries.append((token, at + i, job.slot.seq_id, True))
    budget = n_batch - len(plan.entries)
    chunk_limit = SHARED_PREFILL_CHUNK if decoding else budget
    for job in jobs:
        if not job.prefilling or budget <= 0:
            continue
        n = min(job.text_left, budget, chunk_limit)     # an image is evaluated apart (images.py)
        if n <= 0:
            continue
        last = n == job.prompt_left
        at = job.position(job.n_past)
        for i in range(n):
            plan.entries.append((job.prompt[job.n_past + i], at + i, job.slot.seq_id, last and i == n - 1))
        plan.rows.append(Row(job, len(plan.entries) - 1 if last else None, n))
        budget -= n
        plan.prefill_jobs.append(job)
    return plan
