"""Choosing each job's next token from a step's logits; what it decided goes back to the runtime.

A plain job's token is chosen at once (choose()); a job with forced tokens (a spent reasoning
budget) takes the next one; a grammar job's token is chosen on the job's own worker thread
(pending_sample.py): the job sits out of the batch until it is ready, the others keep their
pace, and past --sample-time-limit the job fails. take_ready() and its waiting forms say, per
job, what was decided off-thread: a Chosen run of tokens, or TooSlow. What a chosen token does
to its job (its state, text, events, the end) is the runtime step's (runtime.py, take_token.py).
"""

from __future__ import annotations

import time
from typing import NamedTuple

from ..engine.engine import Engine
from . import logprobs
from .jobs import Job, PendingChoice
from .pending_sample import PendingSample, SampleWorker
from .scheduler import Scheduler

# After a step, how long the runtime waits for grammar tokens being chosen off-thread before
# it goes on without them; with nothing else to run, how long it waits before looking again.
SAMPLE_GRACE = 0.05
IDLE_SAMPLE_WAIT = 0.05


class TooSlow(NamedTuple):
    """A grammar job's token took longer than the time limit: the job fails."""
    seconds: float


class Chosen(NamedTuple):
    """The tokens a grammar job's thread chose: the run that verifies `draft` (its first token
    alone without one), and the error that cut it short, if any."""
    draft: list[int]
    tokens: list[int]
    error: BaseException | None
    first_entry: dict | None        # the first token's logprob distribution, read before the hand-off
    rows: object                    # the logits rows after the first, copied (numpy), for logprobs
    top_logprobs: int
    piece: object                   # engine.piece

    def at(self, i: int) -> tuple[int, dict | None]:
        """The i-th token and its logprob distribution (None when the job asked for none)."""
        if i == 0 or self.rows is None:
            return self.tokens[i], self.first_entry
        return self.tokens[i], logprobs.distribution(self.rows[i], self.top_logprobs, self.piece)


class TokenChooser:
    def __init__(self, engine: Engine, scheduler: Scheduler, sample_time_limit: float):
        self.engine = engine
        self.scheduler = scheduler
        self.cond = scheduler.cond          # a finished sample wakes the runtime through it
        self.sample_time_limit = sample_time_limit

    def choose(self, job: Job, row: int) -> tuple[int, dict | None]:
        """The token chosen from logits row `row` (the next forced one, else the sampler's), and its
        logprob distribution when the job asked for one."""
        entry = self._distribution(job, self.engine.logits(row) if job.request.logprobs else None)
        if job.forced:      # the job writes it as it takes it (Job.taking)
            token = job.forced[0]
            job.sampler.accept(token)
        else:
            token = job.sampler.sample(row)
        return token, entry

    def hand_off(self, job: Job, row: int, draft: list[int]) -> PendingChoice | None:
        """A grammar job's token (or draft run) is chosen on its worker thread (pending_sample.py):
        the choice started there, which the job awaits (then take_ready() has it); None for a
        token choose() takes."""
        if not job.sampler.has_grammar or job.forced:
            return None
        first_entry = self._distribution(job, self.engine.logits(row) if job.request.logprobs else None)
        worker = job.sample_worker or SampleWorker()
        if not draft:
            job.sampler.load(row)
            return PendingChoice(PendingSample(job.sampler, self._sample_ready, worker), worker, first_entry, [], None)
        import numpy as np      # the step's logits are overwritten by the next decode: the run gets a copy
        rows = np.array([self.engine.logits(row + i) for i in range(len(draft) + 1)])
        sampler, draft = job.sampler, list(draft)
        sample = PendingSample(sampler, self._sample_ready, worker, rows=len(rows),
                               choose=lambda out: sampler.choose_run(rows, draft, out))
        return PendingChoice(sample, worker, first_entry, draft, rows)

    def _distribution(self, job: Job, logits) -> dict | None:
        """What must be read from the logits row of the token being chosen (its logprobs)."""
        if not job.request.logprobs:
            return None
        return logprobs.distribution(logits, job.request.top_logprobs, self.engine.piece)

    def _sample_ready(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def collect(self, wait: float = 0.0, started_since: float | None = None) -> list[tuple[Job, Chosen | TooSlow]]:
        """Wait up to `wait` seconds for the samples started since `started_since` to be ready; then
        what was decided off-thread (take_ready)."""
        deadline = time.monotonic() + wait
        while True:
            awaited = [job.pending for job in self.scheduler.active() if job.pending is not None
                       and started_since is not None and job.pending.started >= started_since
                       and not job.pending.done]
            now = time.monotonic()
            if not awaited or now >= deadline:
                return self.take_ready()
            with self.cond:
                if not any(sample.done for sample in awaited):
                    self.cond.wait(deadline - now)

    def idle_until_a_sample(self) -> list[tuple[Job, Chosen | TooSlow]]:
        """Only grammar samples are running: sleep until one is ready, a job arrives, or a limit is due."""
        pending = [job.pending for job in self.scheduler.active() if job.pending is not None]
        due = min(sample.started for sample in pending) + self.sample_time_limit - time.monotonic()
        with self.cond:
            if (not self.scheduler.waiting and not self.scheduler.stopping
                    and not any(sample.done for sample in pending)):
                self.cond.wait(max(0.0, min(due, IDLE_SAMPLE_WAIT)))
        return self.take_ready()

    def take_ready(self) -> list[tuple[Job, Chosen | TooSlow]]:
        """Per job, what its thread decided: the tokens it chose (the runtime takes them, and the
        job its choice), or that it is past the time limit (the job keeps its pending sample:
        ending the job abandons it)."""
        decided: list[tuple[Job, Chosen | TooSlow]] = []
        now = time.monotonic()
        for job in self.scheduler.active():
            choice = job.choice
            if choice is None:
                continue
            sample = choice.sample
            if sample.seconds(now) > self.sample_time_limit * sample.rows:
                decided.append((job, TooSlow(sample.seconds(now))))
            elif sample.done:
                decided.append((job, self._chosen(job, choice)))
        return decided

    def _chosen(self, job: Job, choice: PendingChoice) -> Chosen:
        return Chosen(choice.draft, choice.sample.tokens, choice.sample.error, choice.first_entry,
                      choice.draft_rows if job.request.logprobs else None, job.request.top_logprobs, self.engine.piece)
