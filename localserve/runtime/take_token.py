"""What a chosen token does to its job: its text and events, its logprob entry, the reasoning
budget, a strict call's grammar woken, and whether the job ends with it.

The runtime step takes each token chosen for a job through take_token(), in order, then emits
the events it returns and, with a finish reason, ends the job (runtime.py). What the token does
to the job's own state goes through the job's methods (jobs.py).
"""

from __future__ import annotations

import time

from ..engine.engine import Engine
from ..generation import Context
from . import logprobs
from .call_wake import wake_at_open_call
from .jobs import Job
from .outcome import finish_reason

_NO_EVENTS: tuple = ()


def take_token(job: Job, token: int, logprob_entry: dict | None, engine: Engine) -> tuple[list | tuple, str | None]:
    """Take one chosen token: (the events it releases, the finish reason if the job ends with it)."""
    job.taking(token, time.monotonic())
    if engine.is_eog(token):
        return _NO_EVENTS, "stop"
    in_reasoning = job.pipeline.in_reasoning
    job.took(token, in_reasoning)
    if in_reasoning and (closing := _reasoning_closed(job, engine)):
        job.force(closing)
    piece = engine.piece(token)
    if logprob_entry is not None:
        job.hold_logprob(logprobs.choose(logprob_entry, token, piece))
    events = job.pipeline.feed(piece)
    job.release_logprobs(events)
    if len(job.generated) == 1:
        events.append(Context(job.n_past + 1, engine.n_ctx_seq))
    reason = finish_reason(job, engine.n_ctx_seq)
    if not reason:
        job.chose(token)
        if (refused := wake_at_open_call(job, engine.piece)) is not None:
            job.refused_call(refused)
    return events, reason


def _reasoning_closed(job: Job, engine: Engine) -> list[int]:
    """Past its thinking budget, the tokens that make a job close its reasoning and answer (none
    before, or once given)."""
    budget = job.request.reasoning_budget
    if budget is None or job.budget.spent or job.progress.reasoning_tokens < budget:
        return []
    if job.request.sampling.grammar:
        return []   # a grammar decides every token; forcing one could violate it
    return engine.tokenize(job.request.reasoning.close, add_special=False, parse_special=True)
