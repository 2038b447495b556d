"""Admission, part of the runtime's step (runtime.py): waiting jobs take free slots. Editor
completions go first, parking a running job when none is free (preempt.py); then the scheduler
places each waiting job (scheduler.py, placement.py), its slot's sequence is made a prefix of
its prompt (kvslots.py: its own, a copy of another's, or one from RAM) and its Job starts.

What else admission finds (jobs whose clients left, jobs that could not start) it hands back in
an Admitted; the runtime ends them, as it ends every job."""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

from ..engine.engine import Engine, GrammarError
from ..generation import ActiveGeneration, Context, GenerationFailure, InvalidGrammar
from ..ops.metrics import ServerMetrics
from .images import text_tokens
from .jobs import Job, Slot
from .kvslots import SlotKeeper
from .placement import Placement
from .preempt import Parking
from .scheduler import Scheduler
from .speculative import Speculator

log = logging.getLogger("localserve.runtime")


@dataclass
class Admitted:
    """What one step's admission did, for the runtime to apply."""
    started: list[tuple[ActiveGeneration, Context]] = field(default_factory=list)    # each job's first event
    cancelled_parked: list[Job] = field(default_factory=list)        # parked jobs whose clients left
    cancelled_waiting: list[ActiveGeneration] = field(default_factory=list)     # queued, client gone: no slot
    failed: list[tuple[Job, GenerationFailure]] = field(default_factory=list)  # in a slot, could not start
    failed_unstarted: list[tuple[ActiveGeneration, GenerationFailure]] = field(default_factory=list)


@dataclass
class Admission:
    engine: Engine
    kv: SlotKeeper
    scheduler: Scheduler
    parking: Parking
    speculator: Speculator
    metrics: ServerMetrics

    def admit(self) -> Admitted:
        admitted = Admitted()
        start = functools.partial(self._start_admitted, admitted=admitted)
        if self.parking.parked or self.scheduler.waiting:      # editor completions first (preempt.py)
            admitted.cancelled_parked = self.parking.admit_editors(start)
        if not self.scheduler.waiting:      # the common step: nothing queued (a racy read, checked again below)
            return admitted
        admitted.cancelled_waiting.extend(self.scheduler.drop_cancelled_waiting())
        while (admission := self.scheduler.next_admission()) is not None:
            gen, placement = admission
            if placement is None:
                admitted.cancelled_waiting.append(gen)
                continue
            start(gen, placement.slot, placement)
        return admitted

    def _start_admitted(self, gen: ActiveGeneration, slot: Slot, placement: Placement | None = None, *,
                        admitted: Admitted) -> None:
        try:
            self._start(gen, slot, placement, admitted)
        except Exception:       # this job alone fails; the others and the slot go on
            log.exception("could not start job %s (%s)", gen.id, gen.request.label)
            error = GenerationFailure("internal error while starting this request")
            if slot.job is not None and slot.job.gen is gen:
                admitted.failed.append((slot.job, error))
            else:
                self.kv.clear(slot)
                admitted.failed_unstarted.append((gen, error))

    def _start(self, gen: ActiveGeneration, slot: Slot, placement: Placement | None, admitted: Admitted) -> None:
        """The job takes the slot; `placement` says which prefix it is handed (none: its own)."""
        placement = placement or Placement(slot)
        origin = self.kv.prepare(placement, gen.request.prompt_tokens, gen.request.images, gen.request.scope)
        self.metrics.record_prefix(origin.source, origin.tokens, placement.waited)
        keep = origin.tokens
        try:
            sampler = self.engine.new_sampler(gen.request.sampling)
        except GrammarError as exc:
            admitted.failed_unstarted.append((gen, InvalidGrammar(str(exc))))
            return
        job = Job(gen, slot, sampler, keep, checkpoint_at=self.kv.checkpoint_wanted(slot.seq_id),
                  drafts=self.speculator.start(text_tokens(gen.request), gen.request.prediction, gen.request.scope))
        job.start()
        admitted.started.append((gen, Context(keep, self.engine.n_ctx_seq)))
