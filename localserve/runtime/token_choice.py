"""The sampler driver: choosing each job's next token from a step's logits.

A plain job's token is chosen at once; a job with forced tokens (a spent reasoning budget)
takes the next one; a grammar job's token is chosen on the job's own worker thread
(pending_sample.py): the job sits out of the batch until it is ready, the others keep their
pace, and past --sample-time-limit the job fails. What a chosen token does to its job (text,
events, the end) is the runtime's: it gets each token, each error and each overrun through
the callbacks given here.
"""

from __future__ import annotations

import time
from typing import Callable

from ..engine.engine import Engine
from . import logprobs
from .jobs import Job, JobStatus
from .pending_sample import PendingSample, SampleWorker
from .scheduler import Scheduler

# After a step, how long the runtime waits for grammar tokens being chosen off-thread before
# it goes on without them; with nothing else to run, how long it waits before looking again.
SAMPLE_GRACE = 0.05
IDLE_SAMPLE_WAIT = 0.05


class SamplerDriver:
    def __init__(self, engine: Engine, scheduler: Scheduler, sample_time_limit: float, *,
                 on_token: Callable[[Job, int, dict | None], None],
                 on_error: Callable[[Job, Exception], None],
                 on_too_slow: Callable[[Job, float], None],
                 on_verified: Callable[[Job, int, int], None] = lambda job, drafted, accepted: None):
        self.engine = engine
        self.scheduler = scheduler
        self.cond = scheduler.cond          # a finished sample wakes the runtime through it
        self.sample_time_limit = sample_time_limit
        self.on_token = on_token
        self.on_error = on_error
        self.on_too_slow = on_too_slow
        self.on_verified = on_verified      # (job, drafted, accepted) after each sampled row or run

    def sample(self, job: Job, row: int, draft: list[int] = ()) -> None:
        """Choose one job's next token from logits row `row`; whatever goes wrong ends this job alone.

        With a draft (its tokens decoded after this one, their logits in the rows that follow),
        go on choosing while each token chosen equals the draft's: each such token is already in
        the KV cache, and the next row holds what follows it (speculative.py)."""
        accepted = 0
        try:
            if job.sampler.has_grammar and not job.forced:
                self._sample_off_thread(job, row, draft)
                return
            for i in range(len(draft) + 1):
                if i:
                    job.n_past += 1         # draft[i - 1], decoded in this step, is now the sequence's
                logprob_entry = self._begin(job, self.engine.logits(row + i) if job.logprobs is not None else None)
                if job.forced:
                    token = job.forced.popleft()
                    job.sampler.accept(token)
                else:
                    token = job.sampler.sample(row + i)
                accepted, goes_on = self._take_verified(job, draft, i, token, logprob_entry, accepted)
                if not goes_on:
                    break
        except Exception as exc:
            self.on_error(job, exc)
        self.on_verified(job, len(draft), accepted)

    def _take_verified(self, job: Job, draft: list[int], i: int, token: int, entry: dict | None,
                       accepted: int) -> tuple[int, bool]:
        """The token chosen at position i of a run out; (drafted tokens accepted so far, whether the
        run goes on: the token was the draft's and the job is not finished)."""
        matched = i < len(draft) and token == draft[i]
        accepted += matched
        if draft and job.drafts is not None:      # a job that finishes on this token reports this draft
            job.drafts.verifying(len(draft), accepted)
        had_grammar = job.sampler.has_grammar
        self.on_token(job, token, entry)
        # A grammar woken by this token (call_grammar.py): the rest of the run is chosen off this
        # thread, as every grammar job's tokens are (a grammar's cost per token has no bound).
        woke = not had_grammar and job.sampler.has_grammar
        return accepted, matched and not woke and job.status is not JobStatus.FINISHED

    def _sample_off_thread(self, job: Job, row: int, draft: list[int]) -> None:
        """A grammar job's token (or draft run) is chosen on its worker thread (pending_sample.py)."""
        job.pending_logprobs = self._begin(job, self.engine.logits(row) if job.logprobs is not None else None)
        job.pending_draft = list(draft)
        if job.sample_worker is None:
            job.sample_worker = SampleWorker()
        if not draft:
            job.sampler.load(row)
            job.pending = PendingSample(job.sampler, self._sample_ready, job.sample_worker)
            return
        import numpy as np      # the step's logits are overwritten by the next decode: the run gets a copy
        rows = np.array([self.engine.logits(row + i) for i in range(len(draft) + 1)])
        job.pending_rows = rows
        sampler = job.sampler
        job.pending = PendingSample(sampler, self._sample_ready, job.sample_worker, rows=len(rows),
                                    choose=lambda out: sampler.choose_run(rows, draft, out))

    def _begin(self, job: Job, logits) -> dict | None:
        """Bookkeeping for the token just decoded, and what must be read from its logits row."""
        if job.status is JobStatus.DECODING:
            job.slot.tokens.append(job.next_token)      # decoded in this step
        else:
            job.slot.tokens = list(job.prompt)          # the prompt is now wholly in the cache
            job.status = JobStatus.DECODING
        job.next_token = None
        if job.logprobs is None:
            return None
        return logprobs.distribution(logits, job.request.top_logprobs, self.engine.piece)

    def _sample_ready(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def collect(self, wait: float = 0.0, started_since: float | None = None) -> None:
        """Take the tokens chosen off-thread and fail the jobs past the time limit; then wait up to
        `wait` seconds for the samples started since `started_since` to be ready too."""
        deadline = time.monotonic() + wait
        while True:
            self.take_ready()
            awaited = [job.pending for job in self.scheduler.active() if job.pending is not None
                       and started_since is not None and job.pending.started >= started_since]
            now = time.monotonic()
            if not awaited or now >= deadline:
                return
            with self.cond:
                if not any(sample.done for sample in awaited):
                    self.cond.wait(deadline - now)

    def idle_until_a_sample(self) -> None:
        """Only grammar samples are running: sleep until one is ready, a job arrives, or a limit is due."""
        pending = [job.pending for job in self.scheduler.active() if job.pending is not None]
        due = min(sample.started for sample in pending) + self.sample_time_limit - time.monotonic()
        with self.cond:
            if (not self.scheduler.waiting and not self.scheduler.stopping
                    and not any(sample.done for sample in pending)):
                self.cond.wait(max(0.0, min(due, IDLE_SAMPLE_WAIT)))
        self.take_ready()

    def take_ready(self) -> None:
        now = time.monotonic()
        for job in self.scheduler.active():
            sample = job.pending
            if sample is None:
                continue
            if sample.seconds(now) > self.sample_time_limit * sample.rows:
                self.on_too_slow(job, sample.seconds(now))
            elif sample.done:
                job.pending = None
                self._finish(job, sample)

    def _finish(self, job: Job, sample: PendingSample) -> None:
        """The tokens a grammar job's thread chose: taken in order, as sample() takes a run."""
        draft, rows = job.pending_draft, job.pending_rows
        job.pending_draft, job.pending_rows = [], None
        accepted = 0
        try:
            for i, token in enumerate(sample.tokens):
                if i:
                    job.n_past += 1
                    entry = self._begin(job, rows[i] if job.logprobs is not None else None)
                else:
                    entry = job.pending_logprobs
                accepted, goes_on = self._take_verified(job, draft, i, token, entry, accepted)
                if not goes_on:
                    break
            else:
                if sample.error is not None:
                    raise sample.error
        except Exception as exc:
            self.on_error(job, exc)
        self.on_verified(job, len(draft), accepted)
