"""What a job reports as it ends: why it stops, and its GenerationOutput.

Both are read from the Job alone (its tokens, text pipeline, drafts and clock): the runtime
decides when a job ends and what happens to its slot; this says what the answer holds.
"""

from __future__ import annotations

import time

from ..generation import GenerationOutput, Timings
from .jobs import Job

__all__ = ["finish_reason", "finished_output"]


def finish_reason(job: Job, n_ctx_seq: int) -> str | None:
    """Why the job stops after the token it just took; None while it goes on."""
    if job.pipeline.stop_sequence is not None:
        return "stop"
    if job.pipeline.tools_done:
        return "tool_calls"
    if job.pipeline.indent_stopped:
        return "length"             # llama-server's n_indent is a limit, as its n_predict
    if _past_line_time_limit(job):
        return "length"
    limit = job.request.max_tokens
    if limit is not None and len(job.generated) >= limit:
        return "length"
    if job.n_past + 1 >= n_ctx_seq:
        return "length"
    return None


def _past_line_time_limit(job: Job) -> bool:
    """The token just taken ended a line, later than the request's time limit allows."""
    limit = job.request.line_time_limit
    first = job.clocks.first_token
    return limit is not None and job.pipeline.line_ended and first is not None and time.monotonic() - first > limit


def finished_output(job: Job, reason: str, now: float) -> GenerationOutput:
    """The whole answer of a job ending for `reason` at `now` (its text pipeline already finished)."""
    calls = job.pipeline.tool_calls
    if calls and reason in ("stop", "tool_calls"):
        reason = "tool_calls"
    elif reason == "tool_calls":
        reason = "stop"
    first = job.clocks.first_token or now
    parked_prefill, parked_decode = job.parked_seconds(now)     # a parked job's clock stood still (preempt.py)
    drafted, accepted = job.drafts.counts() if job.drafts is not None else (0, 0)
    predicted, predicted_accepted = job.drafts.prediction_counts() if job.drafts is not None else (0, 0)
    return GenerationOutput(
        content="".join(job.pipeline.content),
        reasoning="".join(job.pipeline.reasoning),
        tool_calls=list(calls),
        finish_reason=reason,
        stop_sequence=job.pipeline.stop_sequence,
        prompt_tokens=len(job.prompt),
        cached_tokens=job.progress.n_cached,
        audio_tokens=sum(chunk.n_tokens for chunk in job.request.images if chunk.handle.audio),
        completion_tokens=len(job.generated),
        reasoning_tokens=job.progress.reasoning_tokens,
        accepted_prediction_tokens=predicted_accepted,
        rejected_prediction_tokens=predicted - predicted_accepted,
        logprobs=job.ledger.sent,
        token_ids=list(job.generated),
        slot_id=job.slot.seq_id,
        timings=Timings(
            queued_ms=(job.clocks.admitted - job.gen.created) * 1000,
            prefill_ms=(first - job.clocks.admitted - parked_prefill) * 1000,
            decode_ms=(now - first - parked_decode) * 1000,
            parked_ms=(parked_prefill + parked_decode) * 1000,
            draft_n=drafted,
            draft_n_accepted=accepted,
        ),
    )
