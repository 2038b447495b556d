"""Editor completions before long chats: with every slot busy, a completion takes the slot of a
running job, which waits parked until a slot is free again.

Who may preempt: a request marked `editor_completion` (the fill-in-the-middle routes mark theirs:
/infill, Completions with a `suffix`, Ollama's generate with a `suffix`, a prompt in the model's
own FIM layout on either) that asks for tokens; a warm-up (n_predict 0) only fills the cache and
waits its turn. Who may be parked: any other job in a slot, unless a grammar is choosing its next
token on another thread at that moment, or editor completions went before it often or long enough
already (fairness.py: then it runs to its end, and a parked one takes the next free slot first).
An editor completion never parks another: a client's newer completion supersedes its older one
(dialects/fim.py), and two editors take turns.

Parking copies the job's KV sequence to RAM (llama_state_seq_get_data, as the prompt cache does)
and empties the slot. The Job keeps the rest as it was (its sampler with its RNG and grammar
state, the text held back by its pipeline, the token it decodes next), so once resumed its
stream goes on as if nothing happened: no token lost, none repeated, the same greedy text. A
parked job goes back into the first free slot before any queued job (a queued editor
completion still goes first); what the completion left in that slot goes to the RAM prompt
cache, where the next keystroke finds it. Where llama.cpp cannot place the saved sequence (a
fragmented cache) the job's tokens are decoded again instead. Parked jobs' copies take RAM as
their sequences took KV cells: at most every slot's but one.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Callable

from ..engine.engine import Engine
from ..generation import ActiveGeneration
from ..ops.metrics import ServerMetrics
from .fairness import Fairness, client_of
from .jobs import Job, JobStatus, Slot
from .kvslots import PrefixOrigin, SlotKeeper
from .scheduler import Scheduler, choose_slot

log = logging.getLogger("localserve.runtime")


def may_preempt(gen: ActiveGeneration) -> bool:
    """An editor's completion that asks for tokens (see the module's comment)."""
    return gen.request.editor_completion and gen.request.max_tokens != 0 and not gen.cancelled


def parked_for(job: Job, now: float) -> float:
    """Seconds the job has spent parked, a pause going on included (fairness.py's wait)."""
    return sum(job.parked_seconds(now))


def may_be_parked(job: Job) -> bool:
    # A job with images stays: if its saved sequence could not be placed again, its image
    # positions hold placeholder ids that cannot be decoded as tokens.
    return (not job.request.editor_completion and job.pending is None and not job.request.images
            and job.status in (JobStatus.PREFILLING, JobStatus.DECODING))


@dataclass
class ParkedJob:
    job: Job
    state: bytes                # its KV sequence, as llama_state_seq_get_data wrote it
    in_kv: list[int]            # the tokens that sequence holds, to decode again if it cannot be restored
    origin: PrefixOrigin | None     # where its prompt's cached tokens came from, shown again once resumed

    def as_json(self, preemptions: int) -> dict:
        """/slots: the slot it left, the tokens it saved, how far it got, how often completions went before it."""
        return {"slot": self.job.slot.seq_id, "cached_tokens": len(self.in_kv), "preemptions": preemptions,
                **self.job.progress_json()}


class Parking:
    """Jobs set aside for editor completions, in the order they were parked."""

    def __init__(self, engine: Engine, kv: SlotKeeper, scheduler: Scheduler, metrics: ServerMetrics):
        self.engine = engine            # decodes a sequence again where its saved state cannot be placed
        self.sequences = engine.sequences
        self.kv = kv
        self.scheduler = scheduler
        self.metrics = metrics
        self.fairness = Fairness()
        self.parked: list[ParkedJob] = []
        self.parks = 0              # since start (/slots; /metrics counts them too)
        self.resumes = 0

    def admit_editors(self, start: Callable[[ActiveGeneration, Slot], None]) -> list[Job]:
        """Parked jobs that are due (fairness.py) take free slots back first; then queued editor
        completions take a slot (`start` starts one), parking a job if none is free; then the
        other parked jobs take free slots back before anything else queued. The parked jobs whose
        clients left, for the runtime to end: their copies are dropped first."""
        cancelled = self.take_cancelled()
        slots = self.scheduler.slots
        now = time.monotonic()
        self.resume(slots, only=lambda job: self.fairness.due(job.gen, parked_for(job, now)))
        while (gen := self.scheduler.first_waiting(may_preempt)) is not None:
            slot = self.slot_for_editor(slots, gen, now)
            if slot is None:
                break
            self.scheduler.withdraw(gen)
            start(gen, slot)
        self.resume(slots)
        return cancelled

    @property
    def jobs(self) -> list[Job]:
        return [p.job for p in self.parked]

    def as_json(self) -> list[dict]:
        """The parked jobs, first parked first (/slots)."""
        return [p.as_json(self.fairness.preemptions(p.job.gen)) for p in list(self.parked)]

    def slot_for_editor(self, slots: list[Slot], gen: ActiveGeneration, now: float) -> Slot | None:
        """A free slot (the one the scheduler would choose) unless a job waiting for it is due
        for this client (fairness.py), else one emptied by parking its job; None when every job
        must stay."""
        client = client_of(gen)
        free = [s for s in slots if s.job is None]
        if free:
            waiting = self._waiting_before(gen, now)
            if not all(self.fairness.may_pass(job, client, waited) for job, waited in waiting):
                return None
            self.fairness.passed((job for job, _ in waiting), client, now)
            return choose_slot(free, gen.request.prompt_tokens, gen.request.cache_key, gen.request.scope)
        candidates = [s for s in slots if may_be_parked(s.job)
                      and self.fairness.may_pass(s.job.gen, client, parked_for(s.job, now))]
        if not candidates:
            return None
        slot = min(candidates, key=lambda s: s.job.n_past)     # the smallest sequence: the cheapest copy
        self.fairness.passed([slot.job.gen], client, now)
        self._park(slot)
        return slot

    def _waiting_before(self, gen: ActiveGeneration, now: float) -> list[tuple[ActiveGeneration, float]]:
        """The jobs a completion taking a free slot goes before, each with how long it has waited:
        the parked ones, and those queued ahead of it that it jumps (not editor completions)."""
        parked = [(p.job.gen, parked_for(p.job, now)) for p in self.parked]
        return parked + [(queued, self.fairness.queued_since(queued, now)) for queued in self.scheduler.ahead_of(gen)
                         if not queued.cancelled and not may_preempt(queued)]

    def resume(self, slots: list[Slot], only: Callable[[Job], bool] = lambda job: True) -> list[Job]:
        """Parked jobs (`only` those it picks) back into free slots, first parked first; those resumed."""
        resumed = []
        while (picked := [p for p in self.parked if only(p.job)]) and (free := [s for s in slots if s.job is None]):
            parked = picked[0]
            self.parked.remove(parked)
            held = parked.job.slot          # what it holds while parked: its tokens, its cache key
            slot = choose_slot(free, held.tokens, held.cache_key, held.scope)
            self._restore(parked, slot)
            resumed.append(slot.job)
        return resumed

    def take_cancelled(self) -> list[Job]:
        """Parked jobs whose clients left: their copies are dropped; the runtime ends them."""
        gone = [p.job for p in self.parked if p.job.gen.cancelled]
        self.parked = [p for p in self.parked if not p.job.gen.cancelled]
        return gone

    def take_all(self) -> list[Job]:
        jobs, self.parked = self.jobs, []
        return jobs

    def _park(self, slot: Slot) -> None:
        job = slot.job
        # a prefilling job's sequence holds the prompt so far; slot.tokens lists it once decoding
        in_kv = list(slot.tokens) if job.status is JobStatus.DECODING else job.prompt[:job.n_past]
        parked = ParkedJob(job, self.sequences.save(slot.seq_id), in_kv, self.kv.origin(slot.seq_id))
        log.info("parked job %s (%s) after %d tokens: an editor completion takes slot %d",
                 job.gen.id, job.request.label, len(job.generated), slot.seq_id)
        job.park(time.monotonic())      # it keeps a copy of the slot it leaves (Job.park)
        self.kv.clear(slot)
        self.parked.append(parked)
        self.parks += 1
        self.metrics.record_park()

    def _restore(self, parked: ParkedJob, slot: Slot) -> None:
        self._vacate(slot)
        job = parked.job
        if parked.origin is not None:       # /slots shows the resumed job's prefix, not the completion's
            self.kv.restore_origin(slot.seq_id, parked.origin)
        # in its slot first: should the restore fail, the runtime fails it as any running job
        job.resume(slot)
        if parked.in_kv and not self.sequences.restore(slot.seq_id, parked.state):
            log.info("job %s's saved sequence could not be placed: decoding its %d tokens again",
                     job.gen.id, len(parked.in_kv))
            self._decode_again(slot.seq_id, parked.in_kv)
        slot.measured(self.sequences.length(slot.seq_id))
        job.resumed(time.monotonic())
        self.resumes += 1
        self.metrics.record_resume()
        log.info("resumed job %s (%s) in slot %d", job.gen.id, job.request.label, slot.seq_id)

    def _vacate(self, slot: Slot) -> None:
        """What the slot holds (the completion that ran there) goes to the RAM cache if worth it."""
        cache = self.kv.cache
        if cache.worth_saving(slot.tokens, scope=slot.scope):
            cache.add(slot.tokens, self.sequences.save(slot.seq_id), slot.scope)
        self.kv.clear(slot)

    def _decode_again(self, seq_id: int, tokens: list[int]) -> None:
        self.sequences.remove(seq_id)
        step = self.engine.n_batch
        for start in range(0, len(tokens), step):
            chunk = tokens[start:start + step]
            self.engine.decode([(t, start + i, seq_id, False) for i, t in enumerate(chunk)])
