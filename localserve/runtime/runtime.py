"""The runtime thread: one scheduler loop over every active sequence.

Shape (as nano-vllm's engine), one step: schedule (scheduler.py: admit waiting jobs
into free slots, end cancelled ones, plan one batch: a token for every decoding job,
then prompt chunks for prefilling ones), run (one llama_decode), postprocess (sample,
turn bytes into events, retire finished jobs); then the step's events go to the
connection threads together. A slot keeps its sequence after its job ends, so the next
job with the same prefix skips that much prefill (kvslots.py).

The parts of a step decide and hand back what they decided (admission.py, token_choice.py,
images.py, take_token.py); the step applies it through the job's own methods (jobs.py), and
ends jobs through endings.py.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Callable

from ..engine.engine import DECODE_ABORTED, DecodeError, Engine, NoLegalToken
from ..ops.fatal import exit_engine_failed
from ..generation import (ActiveGeneration, ChoiceEvents, Finished, GenerationFailure,
                         GenerationRequest, GrammarBacklog, NoAllowedToken, QueueFull, RuntimeStopped,
                         SamplingTooSlow)
from .adapter_turns import AdapterTurns
from .admission import Admission, Admitted
from .context_shift import at_context_end, shift_context
from .embedding_jobs import EmbeddingJob, EmbeddingWork
from .endings import Endings
from .images import ImageWork
from .jobs import Job, Slot
from .kvslots import PrefixSharing, SlotKeeper
from .mailbox import Outbox
from ..ops.metrics import ServerMetrics
from .pending_sample import abandoned_running, refuse_grammar_over_backlog
from .preempt import Parking
from .promptcache import PromptCache
from .take_token import take_token
from .token_choice import SAMPLE_GRACE, Chosen, TokenChooser, TooSlow
from .scheduler import BatchPlan, Scheduler, draft_room
from .slot_state import SlotRequest, SlotStates
from .speculative import Speculator
from ..settings import DEFAULT_SAMPLE_TIME_LIMIT


__all__ = ["Runtime", "QueueFull", "RuntimeStopped", "GrammarBacklog", "EngineFailure"]

log = logging.getLogger("localserve.runtime")

# Steps that fail one after another (an exception, a failed decode): the engine cannot go on.
MAX_FAILED_STEPS = 3


class EngineFailure(Exception):
    """The engine keeps failing: the runtime cannot go on."""


class Runtime:
    def __init__(self, engine: Engine, *, slots: int, max_queue: int, cache_bytes: int = 0,
                 metrics: ServerMetrics | None = None, sample_time_limit: float = DEFAULT_SAMPLE_TIME_LIMIT,
                 on_fatal: Callable[[str], None] = exit_engine_failed,
                 make_embedder: Callable[[], object] | None = None, speculator: Speculator | None = None):
        self.engine = engine
        self.on_fatal = on_fatal        # the runtime cannot go on: by default, exit status 3
        self.failed_steps = 0           # one after another; reset by a decode that succeeds
        self.sample_time_limit = sample_time_limit
        self.metrics = metrics or ServerMetrics()
        self.cache = PromptCache(cache_bytes)
        self.sequences = engine.sequences       # the KV cache's sequences (engine/sequences.py)
        self.kv = SlotKeeper(self.sequences, self.cache)
        self.sharing = PrefixSharing(self.sequences)
        self.scheduler = Scheduler(slots, max_queue, self.sharing.can_copy, wait_for_prefixes=self.sharing.on)
        self.parking = Parking(engine, self.kv, self.scheduler, self.metrics)   # set aside for editor completions (preempt.py)
        self.cond = self.scheduler.cond
        self.speculator = speculator or Speculator("off", 0, engine)
        self.choice = TokenChooser(engine, self.scheduler, sample_time_limit)
        self.outbox = Outbox()          # a step's events go out together, after the step
        self.endings = Endings(self.kv, self.metrics, self.outbox)
        # embedding batches run between decode steps, on a context of their own (embedding_jobs.py)
        self.embeddings = EmbeddingWork(self.cond, max_queue, make_embedder)
        self.images = ImageWork(engine, self.metrics)     # image chunks, between decode steps
        self.turns = AdapterTurns()     # one LoRA adapter set's jobs per step (adapter_turns.py)
        self.admission = Admission(engine, self.kv, self.scheduler, self.parking, self.speculator, self.metrics)
        self.slot_states = SlotStates(self.sequences, self.kv, self.cond)   # slot save/restore/erase, between steps
        self.thread = threading.Thread(target=self._loop, name="runtime", daemon=True)

    # ---- called from connection threads ------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    @property
    def slots(self) -> list[Slot]:
        return self.scheduler.slots

    @property
    def stopping(self) -> bool:
        return self.scheduler.stopping

    def stop(self) -> None:
        with self.cond:
            self.scheduler.stopping = True
            self.cond.notify_all()
        self.thread.join(timeout=5)

    def submit(self, request: GenerationRequest) -> ActiveGeneration:
        return self.submit_all([request])[0]

    def submit_all(self, requests: list[GenerationRequest], events: queue.SimpleQueue | None = None
                   ) -> list[ActiveGeneration]:
        """Queue the jobs together or not at all (a request's `n` choices); with `events`, they
        share that queue, each event a ChoiceEvent of its job's index."""
        for request in requests:
            if not request.prompt_tokens:
                raise ValueError("a generation needs at least one prompt token")   # the protocols refuse it first
            refuse_grammar_over_backlog(request, log)
        gens = [ActiveGeneration(request, ChoiceEvents(events, i) if events is not None else None)
                for i, request in enumerate(requests)]
        self.scheduler.enqueue_all(gens)
        return gens

    def submit_embedding(self, job: EmbeddingJob) -> EmbeddingJob:
        """Queue an embedding or ranking job; QueueFull or RuntimeStopped as submit()."""
        if self.stopping:
            raise RuntimeStopped()
        return self.embeddings.submit(job)

    def submit_slot_request(self, request: SlotRequest) -> SlotRequest:
        """Queue a slot's save, restore or erase (slot_state.py); wait on request.done."""
        if self.stopping:
            raise RuntimeStopped()
        return self.slot_states.submit(request)

    @property
    def queue_depth(self) -> int:
        """Jobs waiting for a slot: queued, or parked for an editor completion (preempt.py)."""
        return len(self.scheduler.waiting) + len(self.parking.parked)

    @property
    def abandoned_samples(self) -> int:
        return abandoned_running()

    @property
    def threads(self) -> int:
        """Threads the model's decode steps run on now (engine/thread_policy.py)."""
        return self.engine.threads

    @property
    def busy_slots(self) -> int:
        return sum(1 for s in self.slots if s.job is not None)

    def slot_state(self) -> dict:
        return {
            "slots": [self._slot_json(slot) for slot in self.slots],
            "parked": self.parking.as_json(),
            "parks": self.parking.parks,            # since the model loaded: jobs parked, and put back
            "resumes": self.parking.resumes,
            "queue_depth": self.queue_depth,
            "ram_cache": {"entries": len(self.cache), "bytes": self.cache.size,
                          "limit_bytes": self.cache.limit_bytes, "hits": self.cache.hits},
            "swa_checkpoints": self.kv.checkpoints.as_json(),
            "threads": self.engine.threads_json(),
            "speculation": self.speculator.as_json(),
            # LoRA adapter sets set on the context since the load: each one a graph reserve
            "lora": {"switches": self.engine.lora.switches} if self.engine.lora is not None else None,
        }

    def _slot_json(self, slot: Slot) -> dict:
        job = slot.job          # read once: the runtime thread may end it meanwhile
        return {"id": slot.seq_id, "busy": job is not None, "cached_tokens": len(slot.tokens),
                "kv_positions": slot.kv_length, "prefix": self.kv.prefix_json(slot.seq_id),
                "job": job.progress_json() if job is not None else None}

    # ---- the loop ------------------------------------------------------------------

    def _active(self) -> list[Job]:
        return self.scheduler.active()

    def _loop(self) -> None:
        try:
            self._serve()
        except BaseException as exc:    # nothing would ever answer a job again: end the process cleanly
            self.on_fatal(f"the runtime thread failed ({type(exc).__name__}: {exc})")

    def _serve(self) -> None:
        while True:
            with self.cond:
                while (not self.stopping and not self.scheduler.waiting and not self._active()
                       and not self.parking.parked and not self.embeddings.pending
                       and not self.slot_states.pending):
                    self.cond.wait()
                if self.stopping:
                    break
            try:
                self.step()
                self.embeddings.step()      # one embedding batch between two decode steps
                self.slot_states.run_pending(self.slots)
            except EngineFailure:
                raise
            except Exception:   # keep serving: fail what was running, not the process
                self.failed_steps += 1
                log.exception("runtime step failed (%d in a row)", self.failed_steps)
                if self.failed_steps >= MAX_FAILED_STEPS:
                    raise
                for job in self._active():
                    self.endings.fail(job, GenerationFailure("internal error in the runtime"))
            finally:
                self.outbox.deliver()
        for job in self._active() + self.parking.take_all():
            self.endings.retire(job, "cancelled")
        self.outbox.deliver()
        self.embeddings.stop()
        self.slot_states.fail_pending(RuntimeStopped("the server is shutting down"))
        for gen in self.scheduler.take_all_waiting():   # nobody will run these: tell their waiters now
            gen.events.put(Finished(error=RuntimeStopped("the server is shutting down")))

    def step(self) -> None:
        plan = self._schedule()
        if plan is None or not plan.entries:        # none, or every job at an image (images.py)
            return
        try:
            self.engine.decode(plan.entries, plan.abort_check())
        except DecodeError as exc:
            self._decode_failed(exc, plan)
            return
        self.failed_steps = 0
        self._postprocess(plan)

    def _schedule(self) -> BatchPlan | None:
        """Admit, end cancelled jobs, take finished grammar samples; the batch to run, if any."""
        self._admitted(self.admission.admit())
        for job in self.scheduler.cancelled():
            self.endings.cancel(job)
        self._take_decided(self.choice.take_ready())
        ready = self.scheduler.runnable()
        if not ready:
            if self._active():
                self._take_decided(self.choice.idle_until_a_sample())
            return None
        adapters, turn = self.turns.pick(ready)
        self.engine.use_adapters(adapters)      # images are decoded under the job's adapters too
        for advance in self.images.evaluate(turn):
            if advance.error is not None:
                self.endings.fail(advance.job, advance.error)
            else:
                advance.job.image_advanced(advance.decoded, advance.in_parts)
        jobs = [job for job in self.scheduler.runnable() if job.request.adapters == adapters]
        if not jobs:
            return None
        drafts = None
        if self.speculator.on:
            drafts = self.speculator.propose(jobs, draft_room(jobs, self.engine.n_batch), self.engine.n_ctx_seq)
        return self.scheduler.plan(jobs, self.engine.n_batch, drafts)

    def _admitted(self, admitted: Admitted) -> None:
        """What admission did: started jobs say so, jobs it could not start or whose clients left end."""
        for job in admitted.cancelled_parked:
            self.endings.end_cancelled(job)
        for gen in admitted.cancelled_waiting:
            self.endings.left_queue(gen)
        for gen, event in admitted.started:
            self._emit(gen, event)
        for job, error in admitted.failed:
            self.endings.fail(job, error)
        for gen, error in admitted.failed_unstarted:
            self.endings.fail_unstarted(gen, error)

    def _postprocess(self, plan: BatchPlan) -> None:
        self.metrics.record_prefill(sum(row.n_tokens for row in plan.rows if row.job in plan.prefill_jobs))
        sampled_at = time.monotonic()
        for row in plan.rows:
            job = row.job
            job.decoded(row.n_tokens)
            if job.prefilling:
                self.kv.prefill_reached(job)      # a window checkpoint where one is wanted
            if row.logits_row is None:
                continue
            if job.gen.cancelled:       # a sample can be slow: a cancel is honoured before each one
                self.endings.cancel(job)
            elif job.request.max_tokens == 0:
                self._prompt_only(job)
            else:
                self._sample(job, row.logits_row, row.draft)
        # a grammar's token is usually ready in a moment: it need not sit out a whole step
        self._take_decided(self.choice.collect(SAMPLE_GRACE, started_since=sampled_at))
        for row in plan.rows:       # what /slots reports, so a test sees no KV cell outlive its token
            row.job.slot.measured(self.sequences.length(row.job.slot.seq_id))

    def _prompt_only(self, job: Job) -> None:
        """A job that asked for no tokens (an editor warming the cache): its prompt is in the cache now."""
        job.prompt_done(time.monotonic())
        self.endings.retire(job, "length")

    def _emit(self, gen: ActiveGeneration, event: object) -> None:
        """Every event, a job's that never got a slot included, waits for the step's end."""
        self.outbox.put(gen, event)

    def _decode_failed(self, exc: DecodeError, plan: BatchPlan) -> None:
        jobs = plan.jobs
        if exc.status == DECODE_ABORTED:
            # A cancel interrupted a prompt chunk: drop what the batch may have left in
            # the cache for the others; they are scheduled again next step.
            for job in jobs:
                if job.gen.cancelled:
                    self.endings.cancel(job)
                else:
                    self.sequences.remove(job.slot.seq_id, job.position(job.n_past), -1)
            return
        log.error("llama_decode failed with status %d", exc.status)
        for job in jobs:
            self.endings.fail(job, GenerationFailure(f"the engine failed to decode (status {exc.status})"))
        self.failed_steps += 1
        if self.failed_steps >= MAX_FAILED_STEPS:
            raise EngineFailure(f"llama_decode failed {self.failed_steps} times in a row (status {exc.status})")

    # ---- per-token work: what was chosen, taken in order -----------------------------

    def _sample(self, job: Job, row: int, draft: list[int]) -> None:
        """Choose the job's next token from logits row `row`; with a draft (its tokens decoded after
        this one, their logits in the rows that follow), go on choosing while each token chosen
        equals the draft's: each such token is already in the KV cache (speculative.py)."""
        job.reached_choice()
        handed = self.choice.hand_off(job, row, draft)
        if handed is not None:          # a grammar's: taken when its thread is done
            job.awaits(handed)
        else:
            self._take_run(job, draft, len(draft) + 1, lambda i: self.choice.choose(job, row + i))

    def _take_decided(self, decided: list[tuple[Job, Chosen | TooSlow]]) -> None:
        """What grammar jobs' threads decided: their tokens, or that one took too long."""
        for job, result in decided:
            if isinstance(result, TooSlow):
                self._too_slow(job, result.seconds)
            else:
                job.choice_taken()
                self._take_run(job, result.draft, len(result.tokens), result.at, result.error)

    def _take_run(self, job: Job, draft: list[int], length: int,
                  choose: Callable[[int], tuple[int, dict | None]], error: BaseException | None = None) -> None:
        """Take the run's tokens in order while each verifies the draft and the job goes on; then
        the draft's verdict. Whatever goes wrong ends this job alone."""
        accepted = 0
        try:
            for i in range(length):
                if i:
                    job.kept_draft_token()      # draft[i - 1], decoded in this step, is the sequence's now
                token, entry = choose(i)
                matched = i < len(draft) and token == draft[i]
                accepted += matched
                if draft and job.drafts is not None:      # a job that finishes on this token reports this draft
                    job.drafts.verifying(len(draft), accepted)
                had_grammar = job.sampler.has_grammar
                if at_context_end(job, self.engine.n_ctx_seq):     # Ollama's shift: room for it to go on
                    shift_context(job, self.sequences, self.kv.checkpoints)
                events, reason = take_token(job, token, entry, self.engine)
                for event in events:
                    self._emit(job.gen, event)
                if reason:
                    self.endings.retire(job, reason)
                # A grammar woken by this token (call_wake.py): the rest of the run is chosen off
                # this thread, as every grammar job's tokens are (a grammar's cost per token has no bound).
                if reason or not matched or (not had_grammar and job.sampler.has_grammar):
                    break
            else:
                if error is not None:
                    raise error
        except Exception as exc:
            self._sample_failed(job, exc)
        self._verified(job, len(draft), accepted)

    def _too_slow(self, job: Job, seconds: float) -> None:
        log.warning("job %s (%s) took %.2f s choosing one token; failing it", job.gen.id, job.request.label, seconds)
        self.endings.fail(job, SamplingTooSlow(
            f"choosing one token took over {self.sample_time_limit:g} s (--sample-time-limit): the grammar "
            f"or schema is too costly to follow; simplify it"))

    def _sample_failed(self, job: Job, exc: Exception) -> None:
        if isinstance(exc, NoLegalToken):
            if exc.grammar_complete:    # only an end token could follow, and it is banned: the output is whole
                self.endings.retire(job, "stop")
            else:
                self.endings.fail(job, NoAllowedToken("no token is allowed by both the grammar and logit_bias: "
                                               "the bias bans every token the grammar allows next"))
            return
        log.error("sampling failed for job %s (%s)", job.gen.id, job.request.label, exc_info=exc)
        self.endings.fail(job, GenerationFailure("internal error while sampling this request"))

    def _verified(self, job: Job, drafted: int, accepted: int) -> None:
        """A draft was verified: what was decoded past the tokens the sequence kept leaves the cache."""
        if not drafted:
            return
        self.speculator.record(job, drafted, accepted)
        self.metrics.record_drafts(drafted, accepted)
        self.sequences.remove(job.slot.seq_id, job.position(len(job.slot.tokens)), -1)
