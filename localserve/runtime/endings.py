"""How a job ends: retired (its last text, its answer), cancelled (what its answer holds so far;
what its prompt computed stays for a job that shares it), or failed; what its slot's sequence keeps,
its sampler and worker thread let go, the metrics. Every ending's events wait in the step's
outbox (mailbox.py) and go out after the step. The runtime step decides when (runtime.py)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from ..generation import ActiveGeneration, Compacted, Finished, GenerationFailure, GenerationOutput
from ..ops.metrics import ServerMetrics
from .jobs import Job
from .kvslots import SlotKeeper
from .mailbox import Outbox
from .outcome import finished_output

log = logging.getLogger("localserve.runtime")


@dataclass
class Endings:
    kv: SlotKeeper
    metrics: ServerMetrics
    outbox: Outbox

    def retire(self, job: Job, reason: str) -> None:
        events = job.pipeline.finish() if reason != "cancelled" else []
        job.release_logprobs(events)
        for event in events:
            self.outbox.put(job.gen, event)
        output = finished_output(job, reason, time.monotonic())
        if job.drafts is not None:
            job.drafts.finished(job.generated)
        _release(job)
        self.metrics.record_generation(output)
        if job.request.compaction:     # a model that only thought still leaves its thoughts as the summary
            self.metrics.record_compaction()
            self.outbox.put(job.gen, Compacted(output.content.strip() or output.reasoning.strip()))
        self.outbox.put(job.gen, Finished(output))

    def cancel(self, job: Job) -> None:
        if job.prefilling:      # what it computed of its prompt stays, for a job that shares it
            self.kv.keep_computed(job)
        else:
            self.kv.clear(job.slot)
        self.end_cancelled(job)

    def end_cancelled(self, job: Job) -> None:
        """A cancelled job's answer; its slot's sequence is already dealt with (a parked job has none)."""
        # n_past goes on past the prompt as tokens are written: the prompt's share is what was prefilled
        log.info("cancelled job %s (%s) after %d tokens (%d of %d prompt tokens in the cache): %s", job.gen.id,
                 job.request.label, len(job.generated), min(job.n_past, len(job.prompt)), len(job.prompt),
                 job.gen.cancel_reason)
        self.metrics.record_cancellation(len(job.generated))
        # with the text it wrote so far (what its text pipeline still held back is dropped): a client
        # still there, as a superseded editor completion's, reads an answer its token count matches
        output = finished_output(job, "cancelled", time.monotonic())
        _release(job)
        self.outbox.put(job.gen, Finished(output))

    def fail(self, job: Job, error: GenerationFailure) -> None:
        self.kv.clear(job.slot)
        _release(job)
        self.metrics.record_failure(len(job.generated))
        self.outbox.put(job.gen, Finished(error=error))

    def left_queue(self, gen: ActiveGeneration) -> None:
        """A job whose client left while it waited for a slot."""
        self.metrics.record_cancellation()
        self.outbox.put(gen, Finished(GenerationOutput(finish_reason="cancelled")))

    def fail_unstarted(self, gen: ActiveGeneration, error: GenerationFailure) -> None:
        """A job that failed before it had a slot of its own."""
        self.metrics.record_failure()
        self.outbox.put(gen, Finished(error=error))


def _release(job: Job) -> None:
    """The job ends (Job.end); what it held off-thread is let go."""
    pending, worker = job.end()
    if pending is not None:     # its thread may still be inside llama.cpp with the sampler
        pending.abandon()
    else:
        job.sampler.free()
    if worker is not None:
        worker.close()
