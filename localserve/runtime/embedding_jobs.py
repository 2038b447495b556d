"""Embedding and ranking jobs: each a list of token sequences to run through the embedding context.

Inputs of every waiting job are packed, in arrival order, into batches of at most
`batch_tokens` tokens and `max_seqs` sequences; a job can span several batches and a batch
several jobs. The runtime thread runs one batch between two decode steps (Runtime._serve),
as chunked prefill shares a step: a large call never holds running streams back for more
than one batch. The packing is plain bookkeeping (tested alone in
tests/unit/runtime/test_embedding_jobs.py); EmbeddingWork runs it on an Embedder.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
from typing import Any, Callable, Sequence

from ..generation import EmbeddingsUnavailable, GenerationFailure, JobCancelled, QueueFull, RuntimeStopped

log = logging.getLogger("localserve.runtime")


class EmbeddingJob:
    """One request's inputs and, as batches finish, their vectors. `done` is set at the end."""

    def __init__(self, inputs: Sequence[Sequence[int]], label: str = ""):
        self.id = uuid.uuid4().hex[:12]
        self.inputs = inputs
        self.label = label
        self.vectors: list[Any] = [None] * len(inputs)
        self.next_input = 0            # the first input not yet in a batch
        self.finished_inputs = 0
        self.error: GenerationFailure | None = None
        self.done = threading.Event()
        self.cancel_flag = threading.Event()
        self.created = time.monotonic()

    @property
    def cancelled(self) -> bool:
        return self.cancel_flag.is_set()

    def cancel(self) -> None:
        self.cancel_flag.set()

    def fail(self, error: GenerationFailure) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


Piece = tuple[EmbeddingJob, int]      # a job and the index of one of its inputs


class EmbeddingQueue:
    """Jobs with inputs still to run, oldest first. Connection threads add; the runtime thread packs."""

    def __init__(self, cond: threading.Condition, max_queue: int):
        self.cond = cond                # the runtime's: adding a job wakes its loop
        self.max_queue = max_queue
        self.jobs: collections.deque[EmbeddingJob] = collections.deque()
        self.stopping = False

    def enqueue(self, job: EmbeddingJob) -> None:
        with self.cond:
            if self.stopping:
                raise RuntimeStopped()
            if len(self.jobs) >= self.max_queue:
                raise QueueFull()
            self.jobs.append(job)
            self.cond.notify_all()

    @property
    def pending(self) -> bool:
        return bool(self.jobs)

    def drop_cancelled(self) -> list[EmbeddingJob]:
        with self.cond:
            gone = [job for job in self.jobs if job.cancelled]
            if gone:
                kept = [job for job in self.jobs if not job.cancelled]
                self.jobs.clear()
                self.jobs.extend(kept)
        return gone

    def next_batch(self, batch_tokens: int, max_seqs: int) -> list[Piece]:
        """The next inputs in arrival order that fit one batch (every input fits one alone)."""
        pieces: list[Piece] = []
        used = 0
        with self.cond:
            for job in self.jobs:
                while job.next_input < len(job.inputs) and len(pieces) < max_seqs:
                    n = len(job.inputs[job.next_input])
                    if pieces and used + n > batch_tokens:
                        return pieces
                    pieces.append((job, job.next_input))
                    job.next_input += 1
                    used += n
                if len(pieces) >= max_seqs:
                    break
            return pieces

    def remove(self, job: EmbeddingJob) -> None:
        with self.cond:
            if job in self.jobs:
                self.jobs.remove(job)

    def take_all(self, stop: bool = False) -> list[EmbeddingJob]:
        """Every job still queued, taken out; with stop, no job is taken in afterwards."""
        with self.cond:
            self.stopping = self.stopping or stop
            jobs, self.jobs = list(self.jobs), collections.deque()
        return jobs


class EmbeddingWork:
    """The runtime thread's side: one batch per call of step(), on an Embedder made at first need."""

    def __init__(self, cond: threading.Condition, max_queue: int, make_embedder: Callable[[], Any] | None):
        self.queue = EmbeddingQueue(cond, max_queue)
        self.make_embedder = make_embedder
        self.embedder: Any = None

    def submit(self, job: EmbeddingJob) -> EmbeddingJob:
        if self.make_embedder is None:
            raise RuntimeError("this runtime has no embedding context")
        self.queue.enqueue(job)
        return job

    @property
    def pending(self) -> bool:
        return self.queue.pending

    def step(self) -> None:
        for job in self.queue.drop_cancelled():
            log.info("cancelled embedding job %s (%s) after %d of %d inputs", job.id, job.label,
                     job.finished_inputs, len(job.inputs))
            job.fail(JobCancelled("cancelled"))
        if not self.queue.pending:
            return
        try:
            embedder = self._embedder()
        except Exception as exc:    # the context could not be made: nothing queued can run now
            log.error("embedding context: %s", exc)
            for job in self.queue.take_all():
                job.fail(EmbeddingsUnavailable(f"embeddings are unavailable: {exc}"))
            return
        spec = embedder.spec
        pieces = self.queue.next_batch(spec.batch_tokens, spec.max_seqs)
        if not pieces:
            return
        try:
            vectors = embedder.run([job.inputs[index] for job, index in pieces])
        except Exception as exc:     # this batch's jobs fail; the others and the streams go on
            log.exception("embedding batch failed")
            for job in {job for job, _ in pieces}:
                self.queue.remove(job)
                job.fail(GenerationFailure(f"the engine failed to embed this input ({exc})"))
            return
        for (job, index), vector in zip(pieces, vectors):
            job.vectors[index] = vector
            job.finished_inputs += 1
            if job.finished_inputs == len(job.inputs):
                self.queue.remove(job)
                job.done.set()

    def stop(self) -> None:
        for job in self.queue.take_all(stop=True):
            job.fail(RuntimeStopped("the server is shutting down"))
        if self.embedder is not None:
            self.embedder.close()
            self.embedder = None

    def _embedder(self) -> Any:
        if self.embedder is None:
            self.embedder = self.make_embedder()
        return self.embedder
