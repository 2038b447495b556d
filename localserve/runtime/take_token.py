"""What a chosen token does to its job: its text and events, its logprob entry, the reasoning
budget, a strict call's grammar woken, and whether the job ends with it.

The runtime step takes each token chosen for a job through take_token(), in order, then emits
the events it returns and, with a finish reason, ends the job (runtime.py).
"""

from __future__ import annotations

import time

from ..engine.engine import Engine
from ..generation import Context
from . import logprobs
from .call_wake import wake_at_open_call
from .jobs import Job
from .outcome import attach_logprobs, finish_reason

_NO_EVENTS: tuple = ()


def take_token(job: Job, token: int, logprob_entry: dict | None, engine: Engine) -> tuple[list | tuple, str | None]:
    """Take one chosen token: (the events it releases, the finish reason if the job ends with it)."""
    if job.t_first_token is None:
        job.t_first_token = time.monotonic()
    if engine.is_eog(token):
        return _NO_EVENTS, "stop"
    job.generated.append(token)
    if job.pipeline.in_reasoning:
        job.reasoning_tokens += 1
        _enforce_reasoning_budget(job, engine)
    piece = engine.piece(token)
    if logprob_entry is not None:
        job.unsent_logprobs.append(logprobs.choose(logprob_entry, token, piece))
    events = job.pipeline.feed(piece)
    attach_logprobs(job, events)
    if len(job.generated) == 1:
        events.append(Context(job.n_past + 1, engine.n_ctx_seq))
    reason = finish_reason(job, engine.n_ctx_seq)
    if not reason:
        job.chose(token)
        wake_at_open_call(job, engine.piece)
    return events, reason


def _enforce_reasoning_budget(job: Job, engine: Engine) -> None:
    """Past its thinking budget, a job is made to close its reasoning and answer."""
    budget = job.request.reasoning_budget
    if budget is None or job.budget_spent or job.reasoning_tokens < budget:
        return
    if job.request.sampling.grammar:
        return      # a grammar decides every token; forcing one could violate it
    job.budget_spent = True
    close = job.request.reasoning.close
    job.forced.extend(engine.tokenize(close, add_special=False, parse_special=True))
