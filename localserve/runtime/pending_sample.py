"""A grammar job's next token, chosen on a thread of the job's own while the runtime goes on.

llama.cpp's grammar sampler keeps a stack per way the text so far can be parsed; an
ambiguous grammar multiplies them, and one token can take seconds or minutes (the limits
checked before a job runs catch the plain cases, not every one). A native call cannot be
interrupted, so the runtime does not make it: it copies the job's logits into the job's
sampler, hands the sample to the job's SampleWorker, and keeps decoding the other jobs; the
job sits out of the batch until its token is ready. The worker is one thread for the job's
whole life (a thread per token would be thousands a minute). Past the time limit the job fails
at once and the sample is abandoned: it finishes inside llama.cpp and frees the sampler then,
and the worker ends after it.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable

from ..engine.sampler import Sampler
from ..generation import GenerationRequest, GrammarBacklog

MAX_ABANDONED_SAMPLES = 4          # grammar samples past the time limit still running: then grammar jobs get 503


_abandoned_lock = threading.Lock()
_abandoned_running = 0      # threads still inside llama.cpp for jobs that have ended


def abandoned_running() -> int:
    """Threads still choosing a token for a job that has ended: each keeps a CPU core busy."""
    return _abandoned_running


def refuse_grammar_over_backlog(request: GenerationRequest, log) -> None:
    """GrammarBacklog for a grammar job while MAX_ABANDONED_SAMPLES samples still run: each is a
    core busy inside llama.cpp until it returns; more would starve every job."""
    grammar = request.sampling.grammar or request.sampling.call_grammar
    if grammar and abandoned_running() >= MAX_ABANDONED_SAMPLES:
        log.warning("%d abandoned grammar samples still running: refusing a grammar job", abandoned_running())
        raise GrammarBacklog()


class PendingSample:
    """The job's next token, or with a draft (speculative.py) the run of tokens that verifies it:
    `choose` appends each token chosen to the list it is given, so an error midway keeps the ones before."""

    def __init__(self, sampler: Sampler, on_done: Callable[[], None], worker: SampleWorker,
                 choose: Callable[[list[int]], None] | None = None, rows: int = 1):
        self.sampler = sampler
        self.rows = rows                # logits rows to sample: the time limit is per token
        self.started = time.monotonic()
        self.finished: float | None = None
        self.tokens: list[int] = []
        self.error: BaseException | None = None
        self._choose = choose or (lambda out: out.append(sampler.choose()))
        self._on_done = on_done
        self._lock = threading.Lock()
        self._abandoned = False
        self._done = False
        worker.submit(self)

    @property
    def done(self) -> bool:
        return self._done

    def seconds(self, now: float) -> float:
        return (self.finished or now) - self.started

    def run(self) -> None:
        """Choose the token(s), on the job's worker thread."""
        try:
            self._choose(self.tokens)
        except BaseException as exc:     # handed to the runtime, which fails this job alone
            self.error = exc
        with self._lock:
            self.finished = time.monotonic()
            self._done = True
            abandoned = self._abandoned
        if abandoned:
            self.sampler.free()
            _count_abandoned(-1)
        self._on_done()

    def abandon(self) -> None:
        """The job has ended: free the sampler now if the thread is done with it, else when it is."""
        with self._lock:
            if not self._done:
                self._abandoned = True
                _count_abandoned(+1)
                return
        self.sampler.free()


class SampleWorker:
    """The one thread that runs a grammar job's samples, one at a time, until the job ends."""

    def __init__(self):
        self._samples: queue.SimpleQueue[PendingSample | None] = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._serve, name="grammar-sample", daemon=True)
        self.thread.start()

    def submit(self, sample: PendingSample) -> None:
        self._samples.put(sample)

    def close(self) -> None:
        """The job has ended: the thread ends after the sample it runs (an abandoned one), if any."""
        self._samples.put(None)

    def _serve(self) -> None:
        while (sample := self._samples.get()) is not None:
            sample.run()


def _count_abandoned(change: int) -> None:
    global _abandoned_running
    with _abandoned_lock:
        _abandoned_running += change
