"""A Messages request whose prompt passes its compact_20260112 trigger (compaction.py): the
conversation is summarised before the model answers.

The model writes the summary itself (dialects/compaction.py: a conversation too long to read
whole is summarised in pieces, oldest first, each waited for; the last summary is this
request's own job, so a stream's head and pings go out while it runs). The summary is the
answer's compaction block; the answer is then generated from the compacted prompt, the system
turns and the summary, which is what the next request renders when the client sends the block
back (a short prefix, still in the prompt cache). With pause_after_compaction the answer is the
block alone, stop_reason "compaction". usage.iterations has the summary's jobs, summed, as one
entry and the answer's as another.
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

from ...errors import ApiError
from ...generation import ActiveGeneration, Chunk, Compacted, Finished, GenerationOutput, ToolCallDelta, ToolCallStart
from ...prompt.build import ChatInput
from ...prompt.compaction import leading_system, summary_message
from ..compaction import CompactionOptions, CompactionUsage, compact_pieces
from ..exchange import Exchange
from ..failures import prompt_refusals
from ..job_events import error_from, job_events, submit
from ..pump import PREFILL_COMMENT, open_stream_early, pump
from ..request_cycle import Reply
from .answer import AnswerBuilder
from .compaction import Compact, Compaction
from .replies import MessageMeta, MessageStream, final_answer, message_start, paused_end, paused_response

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.served import ServedModel


def compacted(chat: ChatInput, summary: str) -> ChatInput:
    """The conversation once compacted: its opening system turns, then the summary."""
    return dataclasses.replace(chat, messages=[*chat.messages[:leading_system(chat.messages)],
                                               summary_message(summary)])


def cancelled(output: GenerationOutput) -> ApiError | None:
    """A summary job the runtime cancelled (the server is stopping) wrote no whole summary."""
    if output.finish_reason != "cancelled":
        return None
    return ApiError(503, "the compaction was cancelled: the server is stopping", code="server_shutting_down")


@dataclass
class RunFailure:
    """The compaction or the answer could not go on (in a stream: after its head went out)."""
    error: ApiError


def compacting_reply(exchange: Exchange, model: ServedModel, chat: ChatInput, answer: AnswerBuilder, meta: MessageMeta,
                     compact: Compact, *, stream: bool, max_tokens: int, keepalive: float) -> Reply:
    """The request's job is the (last) summary's; the answer's follows it. max_tokens: the
    summary's (--compact-max-tokens)."""
    options = CompactionOptions(instructions=compact.instructions, max_tokens=max_tokens,
                                label=f"{answer.label} compaction", param="messages")
    if stream:      # pieces summarised before the request's own job: the head and comments go out meanwhile
        options.on_wait, options.wait_interval = lambda: _keepalive(exchange), keepalive
    # whatever fails once a keepalive sent the head goes in the stream (loading.serve_with_model)
    last = compact_pieces(exchange, model, chat, options)
    run = CompactingRun(exchange, model, chat, answer, meta, compact.pause, last.usage, keepalive)
    return Reply(last.step.request, deliver=run.stream if stream else run.whole)


def _keepalive(exchange: Exchange) -> None:
    open_stream_early(exchange)
    exchange.writer.stream(PREFILL_COMMENT)


@dataclass
class CompactingRun:
    exchange: Exchange
    model: ServedModel
    chat: ChatInput
    answer: AnswerBuilder
    meta: MessageMeta
    pause: bool
    usage: CompactionUsage            # the pieces summarised before this request's job
    keepalive: float
    current: ActiveGeneration | None = None      # the job a client gone cancels

    def summarised(self, summary: str) -> Compaction:
        """The compaction done: its usage counted against the request's cache breakpoint, which
        the answer's prompt no longer holds (it was summarised)."""
        usage = self.meta.usage(self.usage.prompt_tokens, self.usage.cached_tokens, self.usage.completion_tokens)
        self.meta.compaction = Compaction(summary, usage)
        self.meta.cache_breakpoint_tokens = 0
        return self.meta.compaction

    def submit_answer(self, summary: str) -> ActiveGeneration:
        with prompt_refusals():
            request = self.answer.build(compacted(self.chat, summary))
        self.current = submit(self.model, request, self.exchange.scope)
        return self.current

    def whole(self, gen: ActiveGeneration) -> dict:
        self.current = gen
        with self.cancelling():
            for event in self.events(gen, keepalive=0):
                if isinstance(event, RunFailure):
                    raise event.error
                if isinstance(event, Compaction) and self.pause:
                    return self.meta.ended(paused_response(self.meta, event))
                if isinstance(event, Finished):
                    if event.error is not None:
                        raise error_from(event)
                    return final_answer(event.output, self.meta)
        raise AssertionError("the events end with a Finished, a failure or a paused compaction")

    def stream(self, gen: ActiveGeneration) -> None:
        self.current = gen
        shape = CompactingStream(self.meta, len(gen.request.prompt_tokens), self.pause)
        with self.cancelling():
            pump(self.exchange, shape, self.events(gen, self.keepalive), job=self,
                 idle=lambda: self.current is None or self.current.events.empty())

    def cancel(self, reason: str) -> None:
        if self.current is not None:
            self.current.cancel(reason)

    @contextlib.contextmanager
    def cancelling(self) -> Iterator[None]:
        """Whatever fails while the run goes on cancels the job it is at, the summary's or the answer's."""
        try:
            yield
        except BaseException as exc:
            self.cancel(f"the request failed while its job ran ({type(exc).__name__})")
            raise

    def events(self, gen: ActiveGeneration, keepalive: float) -> Iterator[object]:
        """The summary job's events (its text held back), its end as a Compaction, then the answer's."""
        summary = ""
        for event in job_events(self.exchange.writer, gen, keepalive):
            if isinstance(event, Compacted):
                summary = event.summary
            elif isinstance(event, Finished) and event.error is None:
                failure = cancelled(event.output)
                if failure is not None:
                    yield RunFailure(failure)
                    return
                self.usage.add(event.output)
                yield self.summarised(summary)
                break
            elif not isinstance(event, (Chunk, ToolCallStart, ToolCallDelta)):
                yield event          # Context, KEEPALIVE, or a failed Finished (which ends the stream)
        else:
            return                   # the summary job failed
        if self.pause:
            return
        try:
            answer = self.submit_answer(summary)
        except ApiError as error:
            yield RunFailure(error)
            return
        yield from job_events(self.exchange.writer, answer, keepalive)


class CompactingStream(MessageStream):
    """A message stream that opens with the compaction block; with pause, ends after it."""

    def __init__(self, meta: MessageMeta, prompt_tokens: int, pause: bool):
        super().__init__(meta, prompt_tokens)
        self.pause = pause

    def feed(self, ev: object) -> list[bytes]:
        if isinstance(ev, RunFailure):
            self.done = True
            return self.fail(ev.error)
        if not isinstance(ev, Compaction):
            return super().feed(ev)
        out = [] if self.started else [message_start(self.meta, self.prompt_tokens, 0)]
        self.started = True
        out += self.blocks.compaction(ev.summary)
        if self.pause:
            self.done = True
            self.meta.ended(paused_response(self.meta, ev))
            out += paused_end(self.meta, ev)
        return out
