"""Anthropic Messages answers: the runtime's events as Anthropic content blocks, whole or streamed.

- thinking (the reasoning, signed with the app's key so it can come back in history),
  text, and tool_use (id "toolu_…", input an object): a stream keeps the order they were
  generated in, a whole response (whose output keeps no order) puts them in that order;
  whitespace alone makes no text block;
- stop_reason end_turn / max_tokens / stop_sequence (with stop_sequence) / tool_use;
- usage as Anthropic counts it (prompt.cache_usage): cache_read_input_tokens are the
  prompt tokens the prompt cache already held, cache_creation_input_tokens the rest up to
  the last cache_control breakpoint, input_tokens what follows; they sum to the prompt,
  which count_tokens reports;
- with thinking display "omitted", thinking blocks carry an empty text and the signature
  (which seals the text); with context_management, the edits applied
  (`context_management.applied_edits`, in the message and in message_delta);
- with a compaction (compaction.py), its `compaction` block first, usage.iterations, and
  with pause_after_compaction nothing after it (stop_reason "compaction").
A stream is message_start (once the job is admitted and its cache hit is known), a ping,
then per block content_block_start / _delta* / _stop with indices 0, 1, 2…, a
signature_delta closing every thinking block, message_delta with the stop reason and the
cumulative usage, message_stop. While the prompt is queued the stream carries ": prefill"
comments, and pings while it is prefilled; a failure after the headers is `event: error`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ...errors import ApiError
from ...generation import (ActiveGeneration, Chunk, Context, Finished, GenerationOutput, ToolCall, ToolCallDelta,
                          ToolCallStart)
from ...parsing.partial_json import close_object
from ..pump import PREFILL_COMMENT, StreamShape, sse
from ..signing import sign
from .compaction import Compaction, compaction_block, compaction_events, with_iterations
from .errors import anthropic_error_body
from .prompt import cache_usage

PING = sse({"type": "ping"}, "ping")


@dataclass
class MessageMeta:
    id: str
    model: str
    signing_key: bytes = field(repr=False, default=b"")
    omit_thinking: bool = False               # thinking.display "omitted"
    cache_breakpoint_tokens: int = 0          # where the last cache_control falls in the prompt
    context_management: dict | None = None    # {"applied_edits": [...]} when the request asked for edits
    compaction: Compaction | None = None      # the summary written before the answer, once it is
    on_reply: Callable[[dict], None] | None = None     # told the whole message once it ends (threads.py keeps it)

    def usage(self, prompt_tokens: int, cached_tokens: int, output_tokens: int) -> dict:
        return {**cache_usage(prompt_tokens, cached_tokens, self.cache_breakpoint_tokens),
                "output_tokens": output_tokens}

    def ended(self, message: dict) -> dict:
        """`message`, the whole answer, once it has ended well: whoever keeps it is told."""
        if self.on_reply is not None:
            self.on_reply(message)
        return message

    def with_context_management(self, fields: dict) -> dict:
        if self.context_management is not None:
            fields["context_management"] = self.context_management
        return fields


def tool_use_id(call: ToolCall | ToolCallStart) -> str:
    """A generated call's id in Anthropic's shape: toolu_ and the random part minted for it, or
    the model's own id (less an OpenAI-style call_ prefix)."""
    return "toolu_" + (call.id if call.minted else call.id.removeprefix("call_"))


# ---- whole responses ----------------------------------------------------------------

def stop_reason(output: GenerationOutput) -> str:
    if output.finish_reason == "tool_calls":
        return "tool_use"
    if output.finish_reason == "length":
        return "max_tokens"
    if output.stop_sequence is not None:
        return "stop_sequence"
    return "end_turn"


def tool_input(arguments: str) -> dict:
    """A call's input: its arguments, or the object they had begun when the call was cut off (as
    the SDK reads the input_json_delta fragments a stream sent)."""
    return close_object(arguments)


def message_shell(meta: MessageMeta, content: list, stop: str | None, stop_sequence: str | None,
                  usage_: dict) -> dict:
    return {"id": meta.id, "type": "message", "role": "assistant", "model": meta.model, "content": content,
            "stop_reason": stop, "stop_sequence": stop_sequence, "usage": usage_}


def final_usage(output: GenerationOutput, meta: MessageMeta) -> dict:
    answer = meta.usage(output.prompt_tokens, output.cached_tokens, output.completion_tokens)
    return answer if meta.compaction is None else with_iterations(meta.compaction, answer)


def final_response(output: GenerationOutput, meta: MessageMeta) -> dict:
    content: list[dict] = [] if meta.compaction is None else [compaction_block(meta.compaction.summary)]
    if output.reasoning:
        # display "omitted": the text travels only sealed in the signature, and comes back so
        content.append({"type": "thinking", "thinking": "" if meta.omit_thinking else output.reasoning,
                        "signature": sign(meta.signing_key, output.reasoning)})
    if output.content.strip():
        content.append({"type": "text", "text": output.content})
    for call in output.tool_calls:
        content.append({"type": "tool_use", "id": tool_use_id(call), "name": call.name,
                        "input": tool_input(call.arguments)})
    reason = stop_reason(output)
    message = message_shell(meta, content, reason, output.stop_sequence if reason == "stop_sequence" else None,
                            final_usage(output, meta))
    return meta.with_context_management(message)


def final_answer(output: GenerationOutput, meta: MessageMeta) -> dict:
    """The whole answer, whose end whoever keeps it is told (a job the runtime cancelled, as the
    server stops, ended no turn)."""
    message = final_response(output, meta)
    return message if output.finish_reason == "cancelled" else meta.ended(message)


def paused_response(meta: MessageMeta, compaction: Compaction) -> dict:
    """pause_after_compaction: the summary alone."""
    return meta.with_context_management(message_shell(meta, [compaction_block(compaction.summary)], "compaction",
                                                      None, with_iterations(compaction, None)))


# ---- streams ------------------------------------------------------------------------

def event(kind: str, **fields: Any) -> bytes:
    return sse({"type": kind, **fields}, kind)


class BlockStream:
    """Turns generation events into content_block_* events, one open block at a time."""

    def __init__(self, signing_key: bytes, omit_thinking: bool = False):
        self.signing_key = signing_key
        self.omit_thinking = omit_thinking
        self.next_index = 0
        self.open: str | None = None          # "thinking" | "text" | "tool_use"
        self.open_call: int | None = None     # the runtime's call index of an open tool_use block
        self.thinking: list[str] = []
        self.pending = ""                     # whitespace held back until a text block opens

    def chunk(self, reasoning: bool, text: str) -> list[bytes]:
        kind = "thinking" if reasoning else "text"
        if not reasoning and self.open != "text":
            # Whitespace alone (say between two tool calls) opens no block: the whole
            # response leaves out a whitespace-only text too.
            text, self.pending = self.pending + text, ""
            if not text.strip():
                self.pending = text
                return []
        if not text:
            return []
        out: list[bytes] = []
        if self.open != kind:
            block = {"type": "thinking", "thinking": "", "signature": ""} if reasoning else {"type": "text", "text": ""}
            out = self.close() + self._start(block)
        if reasoning:
            self.thinking.append(text)
            if self.omit_thinking:          # the text goes out only in the closing signature
                return out
            delta = {"type": "thinking_delta", "thinking": text}
        else:
            delta = {"type": "text_delta", "text": text}
        return out + [self._delta(delta)]

    def tool_start(self, call: ToolCallStart) -> list[bytes]:
        out = self.close() + self._start({"type": "tool_use", "id": tool_use_id(call), "name": call.name,
                                          "input": {}})
        self.open_call = call.index
        return out

    def tool_delta(self, delta: ToolCallDelta) -> list[bytes]:
        if self.open != "tool_use" or self.open_call != delta.index or not delta.fragment:
            return []
        return [self._delta({"type": "input_json_delta", "partial_json": delta.fragment})]

    def compaction(self, summary: str) -> list[bytes]:
        out = self.close() + compaction_events(self.next_index, summary)
        self.next_index += 1
        return out

    def close(self) -> list[bytes]:
        self.pending = ""
        if self.open is None:
            return []
        out = []
        index = self.next_index - 1
        if self.open == "thinking":
            signature = sign(self.signing_key, "".join(self.thinking))
            out.append(self._delta({"type": "signature_delta", "signature": signature}))
            self.thinking = []
        out.append(event("content_block_stop", index=index))
        self.open = None
        self.open_call = None
        return out

    def _start(self, block: dict) -> list[bytes]:
        self.open = block["type"]
        self.next_index += 1
        return [event("content_block_start", index=self.next_index - 1, content_block=block)]

    def _delta(self, delta: dict) -> bytes:
        return event("content_block_delta", index=self.next_index - 1, delta=delta)


def message_start(meta: MessageMeta, prompt_tokens: int, cached_tokens: int) -> bytes:
    start_usage = meta.usage(prompt_tokens, cached_tokens, 0)
    return event("message_start", message=message_shell(meta, [], None, None, start_usage))


def message_end(output: GenerationOutput, meta: MessageMeta) -> list[bytes]:
    reason = stop_reason(output)
    delta = {"stop_reason": reason, "stop_sequence": output.stop_sequence if reason == "stop_sequence" else None}
    fields = meta.with_context_management({"delta": delta, "usage": final_usage(output, meta)})
    return [event("message_delta", **fields), event("message_stop")]


def paused_end(meta: MessageMeta, compaction: Compaction) -> list[bytes]:
    delta = {"stop_reason": "compaction", "stop_sequence": None}
    fields = meta.with_context_management({"delta": delta, "usage": with_iterations(compaction, None)})
    return [event("message_delta", **fields), event("message_stop")]


def error_event(error: ApiError) -> bytes:
    return sse(anthropic_error_body(error), "error")


class MessageStream(StreamShape):
    """Runtime events → message_start, content blocks, message_delta, message_stop."""
    done = False

    def __init__(self, meta: MessageMeta, prompt_tokens: int):
        self.meta = meta
        self.prompt_tokens = prompt_tokens
        self.blocks = BlockStream(meta.signing_key, meta.omit_thinking)
        self.started = False

    def feed(self, ev: object) -> list[bytes]:
        if isinstance(ev, Context):
            if self.started:
                return []
            self.started = True
            return [message_start(self.meta, self.prompt_tokens, ev.used), PING]
        out = []
        if isinstance(ev, (Chunk, ToolCallStart, ToolCallDelta)):
            if not self.started:      # never expected: the runtime sends Context first
                out.append(message_start(self.meta, self.prompt_tokens, 0))
                self.started = True
            if isinstance(ev, Chunk):
                out += self.blocks.chunk(ev.reasoning, ev.text)
            elif isinstance(ev, ToolCallStart):
                out += self.blocks.tool_start(ev)
            else:
                out += self.blocks.tool_delta(ev)
        elif isinstance(ev, Finished):
            if not self.started:
                out.append(message_start(self.meta, ev.output.prompt_tokens, ev.output.cached_tokens))
            if self.meta.on_reply is not None:
                final_answer(ev.output, self.meta)
            out += self.blocks.close() + message_end(ev.output, self.meta)
        return out

    def fail(self, error: ApiError) -> list[bytes]:
        return [error_event(error)]

    def keepalive(self) -> list[bytes]:
        return [PING if self.started else PREFILL_COMMENT]

    def end(self) -> list[bytes]:
        return []



def message_stream(meta: MessageMeta, gen: ActiveGeneration) -> MessageStream:
    return MessageStream(meta, len(gen.request.prompt_tokens))
