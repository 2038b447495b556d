"""Running a compaction for a dialect: the summarisation jobs (prompt/compaction.py) submitted
to the request's model and read to their Compacted event, and the summary sealed for the
client to hand back.

A compaction is a job like any other: queued, batched with the others, cancelled when its
client leaves (the socket is peeked while it runs), counted in usage and in /metrics
(localserve_compactions_total). A conversation too long to summarise whole is summarised in
pieces, oldest first: every piece but the last is run and waited for here
(compact_pieces), once the token counts show that MAX_COMPACTION_PIECES jobs can be enough
(checked again after each piece, with its summary's length); the last is either run here too
(compact: a compaction before the turn the client asked for) or handed back to the dialect to
run as its own job (a compaction that is the answer: streamed, stored, in the background), its
summary arriving as the runtime's Compacted event.

A summary handed to a client that keeps no state (OpenAI's `encrypted_content`) is sealed
with the data dir's key (signing.py, its own purpose): one that comes back altered, or that
another key sealed, is a 400 invalid_encrypted_content.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..conversation import Message
from ..errors import ApiError
from ..generation import Compacted, Finished, GenerationOutput, GenerationRequest, SamplingParams
from ..prompt.build import ChatInput
from ..prompt.compaction import (MAX_COMPACTION_PIECES, CompactionStep, TooManyPieces, build_compaction,
                                 replace_head)
from ..settings import DEFAULT_COMPACT_MAX_TOKENS
from .exchange import Exchange
from .failures import prompt_refusals
from .job_events import cancel_on_error, error_from, job_events, submit
from .signing import COMPACTION, seal, unseal

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ..models.served import ServedModel

@dataclass
class CompactionUsage:
    """The tokens of every job a compaction ran, summed."""
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    jobs: int = 0

    def add(self, output: GenerationOutput) -> None:
        self.prompt_tokens += output.prompt_tokens
        self.cached_tokens += min(output.cached_tokens, output.prompt_tokens)
        self.completion_tokens += output.completion_tokens
        self.jobs += 1


@dataclass
class Compaction:
    summary: str
    usage: CompactionUsage = field(default_factory=CompactionUsage)


@dataclass
class LastPiece:
    """What compact_pieces leaves to run: the job that summarises the rest (the earlier pieces'
    summary in it), and the usage of the pieces already run."""
    step: CompactionStep
    usage: CompactionUsage


@dataclass
class CompactionOptions:
    instructions: str | None = None     # instead of SUMMARY_PROMPT, where the API lets the client say
    max_tokens: int = DEFAULT_COMPACT_MAX_TOKENS     # --compact-max-tokens
    sampling: SamplingParams | None = None
    label: str = "compaction"
    param: str = "input"                # the request field a too-long conversation is blamed on
    cache_key: str | None = None        # prompt_cache_key: the slot its conversation last used
    # Called every wait_interval seconds while a job runs here (a stream's keepalive: the summary
    # is never streamed, so its client would otherwise hear nothing for the whole compaction).
    on_wait: Callable[[], None] | None = None
    wait_interval: float = 0.0


def compact_pieces(exchange: Exchange, model: ServedModel, chat: ChatInput, options: CompactionOptions) -> LastPiece:
    """Summarise chat's conversation oldest piece first until the rest can be summarised in one
    job; that last job is returned, not run. A 400 context_length_exceeded when not even two
    turns fit the context with room for a summary, or when the conversation takes more than
    MAX_COMPACTION_PIECES jobs: known from its tokens before the first job, or after a piece
    from the length of its summary (the next ones taken as long)."""
    usage = CompactionUsage()
    messages: list[Message] = chat.messages
    summary_tokens = 0
    for run in range(MAX_COMPACTION_PIECES):
        current = dataclasses.replace(chat, messages=messages)
        step = _step(model, current, options, exchange.raise_if_gone, MAX_COMPACTION_PIECES - run, summary_tokens)
        if step.whole:
            return LastPiece(step, usage)
        compaction = run_compaction_job(exchange, model, step.request, options)
        usage.add(compaction.output)
        summary_tokens = compaction.output.completion_tokens
        messages = replace_head(messages, step.covered, compaction.summary)
    raise _too_many_pieces(options)


def _too_many_pieces(options: CompactionOptions) -> ApiError:
    return ApiError(400, f"invalid '{options.param}': the conversation could not be compacted in "
                         f"{MAX_COMPACTION_PIECES} pieces", param=options.param, code="context_length_exceeded")


def compact(exchange: Exchange, model: ServedModel, chat: ChatInput, options: CompactionOptions) -> Compaction:
    """The whole compaction, run and waited for: the summary and every job's usage."""
    last = compact_pieces(exchange, model, chat, options)
    job = run_compaction_job(exchange, model, last.step.request, options)
    last.usage.add(job.output)
    return Compaction(job.summary, last.usage)


def _step(model: ServedModel, chat: ChatInput, options: CompactionOptions, check_client: Callable[[], None],
          jobs_left: int, summary_tokens: int) -> CompactionStep:
    try:
        with prompt_refusals(options.param):
            step = build_compaction(model.chat, chat, instructions=options.instructions, max_tokens=options.max_tokens,
                                    sampling=options.sampling, label=options.label, check_client=check_client,
                                    jobs_left=jobs_left, summary_tokens=summary_tokens)
    except TooManyPieces:
        raise _too_many_pieces(options) from None
    step.request.cache_key = options.cache_key
    return step


@dataclass
class JobSummary:
    summary: str
    output: GenerationOutput


def run_compaction_job(exchange: Exchange, model: ServedModel, request: GenerationRequest,
                       options: CompactionOptions | None = None) -> JobSummary:
    """One summarisation job, waited for (a client that leaves cancels it: ClientGone)."""
    on_wait = options.on_wait if options is not None and options.wait_interval > 0 else None
    interval = options.wait_interval if on_wait is not None else 0.0
    gen = submit(model, request, exchange.scope)
    summary = ""
    next_wait = time.monotonic() + interval
    with cancel_on_error(gen):
        for event in job_events(exchange.writer, gen, interval):
            if on_wait is not None and time.monotonic() >= next_wait:     # prefill's ticks, and decode's too
                on_wait()
                next_wait = time.monotonic() + interval
            if isinstance(event, Compacted):
                summary = event.summary
            elif isinstance(event, Finished):
                if event.error is not None:
                    raise error_from(event)
                if event.output.finish_reason == "cancelled":
                    raise ApiError(503, "the compaction was cancelled: the server is stopping",
                                   code="server_shutting_down")
                return JobSummary(summary, event.output)
    raise AssertionError("job_events ends with the job's Finished")


# ---- the summary sealed for a client to hand back ---------------------------------------

def seal_summary(key: bytes, summary: str) -> str:
    return seal(key, summary, COMPACTION)


def open_summary(key: bytes, blob: object, param: str) -> str:
    """The summary a sealed blob holds; a 400 when this server's key did not seal it, or it was
    altered."""
    summary = unseal(key, blob, COMPACTION)
    if summary is None:
        raise ApiError(400, f"invalid '{param}': the encrypted content could not be verified or decrypted; it "
                            f"was not produced by this server (or its key changed) or it was altered",
                       param=param, code="invalid_encrypted_content")
    return summary
