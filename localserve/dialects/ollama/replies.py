"""Ollama's answers to /api/chat and /api/generate: NDJSON lines while streaming, one object whole.

A stream is one JSON object per line, `done: false` for each piece of text (`message.content`
or `message.thinking` in chat, `response` or `thinking` in generate), each tool call in a line
of its own as soon as it is whole (as Ollama streams them since 0.8), `arguments` as an
object, then a last line with `done: true`, `done_reason` and the
counts and durations (integer nanoseconds, measured). Nothing else goes on the wire: the
keepalive is silence (the socket is still watched), and an error after the head is one
`{"error": ...}` line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from ...errors import ApiError
from ...generation import Chunk, Finished, GenerationOutput, ToolCallDelta, ToolCallStart
from ...parsing.json_depth import json_object
from ...parsing.partial_json import close_object
from ..pump import StreamShape
from .clock import nanoseconds, timestamp
from .errors import ollama_error_body

NDJSON = "application/x-ndjson"


@dataclass
class Answer:
    """What every line of one answer shares, and the clock its durations are read from."""
    model: str
    chat: bool                      # /api/chat's shape (message) or /api/generate's (response)
    started_ns: int = field(default_factory=time.perf_counter_ns)
    loaded_ns: int = 0              # when the model was there (load_duration ends)

    def model_ready(self) -> None:
        self.loaded_ns = time.perf_counter_ns()

    def text(self, content: str = "", thinking: str = "") -> dict:
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if thinking:
                message["thinking"] = thinking
            return {"message": message}
        piece: dict[str, Any] = {"response": content}
        if thinking:
            piece["thinking"] = thinking
        return piece

    def line(self, fields: dict, done: bool = False) -> bytes:
        return orjson.dumps({"model": self.model, "created_at": timestamp(), **fields, "done": done}) + b"\n"

    def whole(self, output: GenerationOutput) -> dict:
        """The non-streaming answer."""
        fields = self.text(output.content, output.reasoning)
        calls = tool_calls(output)
        if calls:
            (fields["message"] if self.chat else fields)["tool_calls"] = calls
        return {"model": self.model, "created_at": timestamp(), **fields, "done": True, **self.final(output)}

    def final(self, output: GenerationOutput) -> dict:
        t = output.timings
        end = time.perf_counter_ns()
        loaded = self.loaded_ns or self.started_ns
        # cancelled: a client still reading is an editor whose newer completion superseded this one
        reason = output.finish_reason if output.finish_reason in ("length", "cancelled") else "stop"
        fields = {"done_reason": reason,
                  "total_duration": end - self.started_ns, "load_duration": loaded - self.started_ns,
                  "prompt_eval_count": output.prompt_tokens, "prompt_eval_duration": nanoseconds(t.prefill_ms),
                  "eval_count": output.completion_tokens, "eval_duration": nanoseconds(t.decode_ms)}
        if not self.chat:
            fields["context"] = []      # the deprecated context array: nothing to continue from
        return fields

    def empty(self, reason: str) -> dict:
        """The answer to a request with nothing to generate: a load or an unload."""
        fields = self.text()
        if not self.chat:
            fields["context"] = []
        return {"model": self.model, "created_at": timestamp(), **fields, "done": True, "done_reason": reason}


def tool_calls(output: GenerationOutput, leave_out: set[int] | None = None) -> list[dict]:
    """The answer's calls in Ollama's shape; `leave_out`: the indices a stream already sent."""
    return [call_json(i, call.id, call.name, close_object(call.arguments))
            for i, call in enumerate(output.tool_calls) if not leave_out or i not in leave_out]


def call_json(index: int, call_id: str, name: str, arguments: dict) -> dict:
    return {"id": call_id, "function": {"index": index, "name": name, "arguments": arguments}}


class WholeCalls:
    """A stream's tool calls, each handed out once it is whole: its arguments a complete JSON
    object (a prefix of an object never parses as one). What never parsed goes out at the end,
    from the answer's own calls."""

    def __init__(self):
        self.open: ToolCallStart | None = None
        self.fragments: list[str] = []
        self.sent: set[int] = set()

    def start(self, event: ToolCallStart) -> None:
        self.open, self.fragments = event, []

    def delta(self, event: ToolCallDelta) -> list[dict]:
        if self.open is None or event.index != self.open.index:
            return []
        self.fragments.append(event.fragment)
        # only where an object may have closed: parsing after every fragment would cost the square
        return self._whole() if event.fragment.rstrip().endswith("}") else []

    def _whole(self) -> list[dict]:
        call = self.open
        if call.index in self.sent:
            return []
        arguments = json_object("".join(self.fragments))
        if arguments is None:
            return []
        self.sent.add(call.index)
        return [call_json(call.index, call.id, call.name, arguments)]


class NdjsonLines(StreamShape):
    """Runtime events → NDJSON lines (the pump writes them)."""
    done = False
    content_type = NDJSON

    @classmethod
    def loading_notice(cls) -> None:
        """NDJSON has no comment line: a load is silence (a line would be read as an answer)."""
        return None

    def __init__(self, answer: Answer):
        self.answer = answer
        self.calls = WholeCalls()

    def feed(self, event: object) -> list[bytes]:
        reply = self.answer
        if isinstance(event, Chunk):
            piece = reply.text(thinking=event.text) if event.reasoning else reply.text(event.text)
            return [reply.line(piece)]
        if isinstance(event, ToolCallStart):
            self.calls.start(event)
            return []
        if isinstance(event, ToolCallDelta):
            return self._calls_line(self.calls.delta(event))
        if isinstance(event, Finished):
            out = self._calls_line(tool_calls(event.output, leave_out=self.calls.sent))   # what is left, before the last
            out.append(reply.line({**reply.text(), **reply.final(event.output)}, done=True))
            return out
        return []

    def _calls_line(self, calls: list[dict]) -> list[bytes]:
        if not calls:
            return []
        piece = self.answer.text()
        (piece["message"] if self.answer.chat else piece)["tool_calls"] = calls
        return [self.answer.line(piece)]

    def fail(self, error: ApiError) -> list[bytes]:
        return [orjson.dumps(ollama_error_body(error)) + b"\n"]

    def keepalive(self) -> list[bytes]:
        return []           # NDJSON has no comment line: silence

    def end(self) -> list[bytes]:
        return []
