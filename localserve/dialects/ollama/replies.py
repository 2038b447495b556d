"""Ollama's answers to /api/chat and /api/generate: NDJSON lines while streaming, one object whole.

A stream is one JSON object per line, `done: false` for each piece of text (`message.content`
or `message.thinking` in chat, `response` or `thinking` in generate), tool calls whole in one
line with `arguments` as an object, then a last line with `done: true`, `done_reason` and the
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
from ...generation import Chunk, Finished, GenerationOutput
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


def tool_calls(output: GenerationOutput) -> list[dict]:
    return [{"id": call.id, "function": {"index": i, "name": call.name, "arguments": orjson.loads(call.arguments)}}
            for i, call in enumerate(output.tool_calls)]


class NdjsonLines:
    """Runtime events → NDJSON lines (the pump writes them)."""
    done = False
    content_type = NDJSON

    def __init__(self, answer: Answer):
        self.answer = answer

    def feed(self, event: object) -> list[bytes]:
        reply = self.answer
        if isinstance(event, Chunk):
            piece = reply.text(thinking=event.text) if event.reasoning else reply.text(event.text)
            return [reply.line(piece)]
        if isinstance(event, Finished):
            out = []
            calls = tool_calls(event.output)
            if calls:       # whole, in one line, before the last
                piece = reply.text()
                (piece["message"] if reply.chat else piece)["tool_calls"] = calls
                out.append(reply.line(piece))
            out.append(reply.line({**reply.text(), **reply.final(event.output)}, done=True))
            return out
        return []           # a call's start and fragments: it goes out whole at the end

    def fail(self, error: ApiError) -> list[bytes]:
        return [orjson.dumps(ollama_error_body(error)) + b"\n"]

    def keepalive(self) -> list[bytes]:
        return []           # NDJSON has no comment line: silence

    def end(self) -> list[bytes]:
        return []
