"""Admission, part of the runtime's step (runtime.py): waiting jobs take free slots. Editor
completions go first, parking a running job when none is free (preempt.py); then the scheduler
places each waiting job (scheduler.py, placement.py), its slot's sequence is made a prefix of
its prompt (kvslots.py: its own, a copy of another's, or one from RAM) and its Job starts."""

from __future__ import annotations

import logging

from ..engine.engine import Engine, GrammarError
from ..generation import (ActiveGeneration, Context, Finished, GenerationFailure, GenerationOutput,
                          InvalidGrammar)
from ..ops.metrics import ServerMetrics
from .images import text_tokens
from .jobs import Job, Slot
from .kvslots import SlotKeeper
from .preempt import Parking
from .placement import Placement
from .scheduler import Scheduler
from .speculative import Speculator

log = logging.getLogger("localserve.runtime")


class Admission:
    """Runtime's admission. The runtime sets the parts below and has the endings these call:
    _emit, _fail, _fail_unstarted and _end_cancelled."""
    engine: Engine
    kv: SlotKeeper
    scheduler: Scheduler
    parking: Parking
    speculator: Speculator
    metrics: ServerMetrics

    def _admit(self) -> None:
        if self.parking.parked or self.scheduler.waiting:      # editor completions first (preempt.py)
            self.parking.admit_editors(self._start_admitted, self._end_cancelled)
        if not self.scheduler.waiting:      # the common step: nothing queued (a racy read, checked again below)
            return
        for gen in self.scheduler.drop_cancelled_waiting():
            self._end_cancelled_waiting(gen)
        while (admission := self.scheduler.next_admission()) is not None:
            gen, placement = admission
            if placement is None:
                self._end_cancelled_waiting(gen)
                continue
            self._start_admitted(gen, placement.slot, placement)

    def _start_admitted(self, gen: ActiveGeneration, slot: Slot, placement: Placement | None = None) -> None:
        try:
            self._start(gen, slot, placement)
        except Exception:       # this job alone fails; the others and the slot go on
            log.exception("could not start job %s (%s)", gen.id, gen.request.label)
            if slot.job is not None and slot.job.gen is gen:
                self._fail(slot.job, GenerationFailure("internal error while starting this request"))
            else:
                self.kv.clear(slot)
                self._fail_unstarted(gen, GenerationFailure("internal error while starting this request"))

    def _end_cancelled_waiting(self, gen: ActiveGeneration) -> None:
        self.metrics.record_cancellation()
        self._emit(gen, Finished(GenerationOutput(finish_reason="cancelled")))

    def _start(self, gen: ActiveGeneration, slot: Slot, placement: Placement | None = None) -> None:
        """The job takes the slot; `placement` says which prefix it is handed (none: its own)."""
        placement = placement or Placement(slot)
        origin = self.kv.prepare(placement, gen.request.prompt_tokens, gen.request.images, gen.request.scope)
        self.metrics.record_prefix(origin.source, origin.tokens, placement.waited)
        keep = origin.tokens
        try:
            sampler = self.engine.new_sampler(gen.request.sampling)
        except GrammarError as exc:
            self._fail_unstarted(gen, InvalidGrammar(str(exc)))
            return
        job = Job(gen, slot, sampler, keep, checkpoint_at=self.kv.checkpoint_wanted(slot.seq_id),
                  drafts=self.speculator.start(text_tokens(gen.request), gen.request.prediction))
        job.start()
        self._emit(gen, Context(keep, self.engine.n_ctx_seq))
