"""Which jobs run in the next step, and how: the waiting queue, admission into free slots, slot
choice (prompt_cache_key affinity, prefix reuse; with prefix sharing, placement.py), the batch
plan with chunked prefill, and which jobs a cancel ends. Plain bookkeeping over Slots and Jobs: it
calls no llama.cpp, so its rules are tested alone (tests/unit/runtime/test_scheduler.py).
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import threading
from dataclasses import dataclass, field
from typing import Callable

from ..generation import ActiveGeneration, QueueFull, RuntimeStopped, outside_images, position_of
from .jobs import Job, JobStatus, Slot
from .placement import Held, Placement, place, waits_for

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
    def __init__(self, slots: int, max_queue: int, can_copy: Callable[[int, int], bool] | None = None,
                 wait_for_prefixes: bool = False):
        self.slots = [Slot(i) for i in range(slots)]
        self.max_queue = max_queue
        self.waiting: collections.deque[ActiveGeneration] = collections.deque()
        self.cond = threading.Condition()     # guards waiting and stopping; wakes the runtime
        self.stopping = False
        # prefix sharing (placement.py): whether a sequence's first n positions can be handed
        # on (None: sharing is off), and whether a job waits for a head another is prefilling
        self.can_copy = can_copy
        self.wait_for_prefixes = wait_for_prefixes and can_copy is not None
        self.prefix_waiters: set[int] = set()     # ids of waiting jobs that waited for a shared head
        self.stops: dict[int, int] = {}           # seq_id: where its prefill pauses, a head others wait for

    # ---- the queue (connection threads) -------------------------------------------------

    def enqueue(self, gen: ActiveGeneration) -> None:
        self.enqueue_all([gen])

    def enqueue_all(self, gens: list[ActiveGeneration]) -> None:
        """Queue every job or none (a request's `n` choices): QueueFull when they do not all fit."""
        with self.cond:
            if self.stopping:
                raise RuntimeStopped()
            free = sum(1 for s in self.slots if s.job is None)   # these take a waiting job at once
            if len(self.waiting) + len(gens) - free > self.max_queue:
                raise QueueFull()
            self.waiting.extend(gens)
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
            self.prefix_waiters.difference_update(id(gen) for gen in dropped)
            kept = [gen for gen in self.waiting if not gen.cancelled]
            self.waiting.clear()
            self.waiting.extend(kept)
        return dropped

    def next_admission(self) -> tuple[ActiveGeneration, Placement | None] | None:
        """The next waiting job that can start and where (None for a cancelled one); None when no
        slot is free or every waiting job waits (for a slot, or for a head another is prefilling)."""
        with self.cond:
            free = [s for s in self.slots if s.job is None]
            self.stops = {}
            if not free or not self.waiting:
                return None
            held = self.held() if self.can_copy is not None else []
            for gen in self.waiting:
                if gen.cancelled or self._may_start(gen, held):
                    break
            else:
                return None
            self.waiting.remove(gen)
            waited = id(gen) in self.prefix_waiters
            self.prefix_waiters.discard(id(gen))
        if gen.cancelled:
            return gen, None
        request = gen.request
        if request.slot_id is not None:
            return gen, Placement(self.pinned_slot(request.slot_id))
        prompt, key, images, scope = request.prompt_tokens, request.cache_key, request.images, request.scope
        if self.can_copy is None:
            return gen, Placement(choose_slot(free, prompt, key, scope))
        can_copy, pick = self.can_copy, lambda: choose_slot(free, prompt, key, scope)
        # place() counts prompt tokens; a sequence holds positions (fewer past an M-RoPE image)
        placement = place(free, held, prompt, key, lambda seq_id, n: can_copy(seq_id, position_of(images, n)), pick,
                          scope)
        return gen, dataclasses.replace(placement, waited=waited)

    def held(self) -> list[Held]:
        """Every sequence with tokens in its KV cache; a prefilling job's with the prompt it is
        on its way to holding (its slot's token list is brought up to date only when it ends)."""
        held = []
        for slot in self.slots:
            job = slot.job
            if job is not None and job.prefilling:     # an image decoded in part counts from its end
                held.append(Held(slot.seq_id, job.prompt[:outside_images(job.request.images, job.n_past)], job.prompt,
                                 job.request.scope, job.request.choice_group))
            elif slot.tokens:
                held.append(Held(slot.seq_id, slot.tokens, scope=slot.scope))
        return held

    def pinned_slot(self, slot_id: int) -> Slot:
        """The slot a job pinned by id takes (llama-server's id_slot: an id past the last wraps)."""
        return self.slots[slot_id % len(self.slots)]

    def _may_start(self, gen: ActiveGeneration, held: list[Held]) -> bool:
        """Whether this job may take a free slot now: its own slot, when pinned to one, is free;
        else it waits for no head another job is prefilling."""
        if gen.request.slot_id is not None:
            return self.pinned_slot(gen.request.slot_id).job is None
        return not self._waits(gen, held)

    def _waits(self, gen: ActiveGeneration, held: list[Held]) -> bool:
        """Whether this job waits for a head of its prompt that another job is prefilling now."""
        if not self.wait_for_prefixes:
            return False
        head = waits_for(gen.request.prompt_tokens, held, gen.request.scope, gen.request.choice_group)
        if head is None:
            return False
        seq_id, n = head
        self.stops[seq_id] = min(n, self.stops.get(seq_id, n))
        self.prefix_waiters.add(id(gen))
        return True

    def first_waiting(self, wanted: Callable[[ActiveGeneration], bool]) -> ActiveGeneration | None:
        """The first waiting job `wanted` picks, to admit out of its turn (an editor completion: preempt.py)."""
        with self.cond:
            return next((gen for gen in self.waiting if wanted(gen)), None)

    def ahead_of(self, gen: ActiveGeneration) -> list[ActiveGeneration]:
        """The jobs queued before this one (which an editor completion admitted out of its turn jumps)."""
        with self.cond:
            return list(itertools.takewhile(lambda queued: queued is not gen, self.waiting))

    def withdraw(self, gen: ActiveGeneration) -> None:
        with self.cond:
            self.waiting.remove(gen)
            self.prefix_waiters.discard(id(gen))    # once it is gone, a later job may get its id

    # ---- the step ----------------------------------------------------------------------

    def cancelled(self) -> list[Job]:
        """Running jobs whose clients left: ended before the step runs."""
        return [job for job in self.active() if job.gen.cancelled]

    def runnable(self) -> list[Job]:
        """Jobs that take part in the next batch: all but those waiting on a grammar sample."""
        return [job for job in self.active() if job.pending is None]

    def plan(self, jobs: list[Job], n_batch: int, drafts: dict[int, list[int]] | None = None) -> BatchPlan:
        return plan_batch(jobs, n_batch, drafts, self.stops)


def draft_room(jobs: list[Job], n_batch: int) -> int:
    """Batch entries left for drafts once every decoding job's token and this step's prompt chunks
    have theirs: a step full of prefill has none (a draft there would only slow the prompts)."""
    decoding = sum(1 for j in jobs if j.status is JobStatus.DECODING)
    chunk_limit = SHARED_PREFILL_CHUNK if decoding else n_batch
    prefill = sum(min(j.text_left, chunk_limit) for j in jobs if j.prefilling)
    return n_batch - decoding - prefill


def choose_slot(free: list[Slot], prompt: list[int], key: str | None = None, scope: str = "") -> Slot:
    """The free slot this prompt (of `scope`) continues; else an empty one; else the least recently
    used. A slot holding another scope's prompt continues nothing (Slot.shared_with).

    A slot counts as continued when the shared prefix covers most of what it holds:
    reusing a slot for a few shared template tokens would throw away another
    conversation's cache for nothing. A prompt_cache_key names the conversation outright:
    the slot its last request used is taken whenever the prefix shares anything (an agent
    that rewrote or compacted its history keeps what still matches).
    """
    shared = {s.seq_id: s.shared_with(prompt, scope) for s in free}
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


def plan_batch(jobs: list[Job], n_batch: int, drafts: dict[int, list[int]] | None = None,
               stops: dict[int, int] | None = None) -> BatchPlan:
    """One batch: a token (and its draft) per decoding job, then prompt chunks within the batch budget;
    a chunk ends at its sequence's stop (a head other jobs wait to copy) when it would pass it."""
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
        for stop in ((stops or {}).get(job.slot.seq_id, 0), job.stops.checkpoint_at):
            if job.n_past < stop < job.n_past + n:
                n = stop - job.n_past
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
