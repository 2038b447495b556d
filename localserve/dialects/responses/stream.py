"""Generation events → Responses stream events, and the Response object they build.

ResponseEvents is the one state machine behind every mode: a stream writes its events as
SSE, a background run records them for replay, a plain request keeps only the Response.
Output items open one at a time (reasoning, message, function call, in generation order);
opening one closes the one before. Every event carries `type` and a `sequence_number`
counting from 0, and a run ends with exactly one of response.completed,
response.incomplete or response.failed — or, when cancelled, with none.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

from ...generation import Chunk, Compacted, Context, GenerationOutput, ToolCall, ToolCallDelta, ToolCallStart
from ...store.store import new_id
from ..compaction import CompactionUsage
from ..function_tools import openai_call_id
from .custom_input import InputDecoder, custom_input
from .tools import LOCAL_SHELL, ToolKind, shell_action

PARALLEL_VIOLATION = "the model made more than one function call while parallel_tool_calls is false"
CALL_ITEMS = ("function_call", "custom_tool_call", "local_shell_call")


def usage(output: GenerationOutput, compaction: CompactionUsage | None = None) -> dict:
    """compaction: the tokens of the compaction jobs the response ran before its own, counted too."""
    prompt, cached = output.prompt_tokens, min(output.cached_tokens, output.prompt_tokens)
    completion = output.completion_tokens
    if compaction is not None:
        prompt, cached = prompt + compaction.prompt_tokens, cached + compaction.cached_tokens
        completion += compaction.completion_tokens
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": prompt - cached},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": output.reasoning_tokens},
        "total_tokens": prompt + completion,
    }


@dataclass
class Compaction:
    """A response's compaction (compacting.py): the item its output opens with (compacted before
    the model ran), or the job is the compaction itself (a trigger: its summary becomes the one
    output item, sealed by `item_of`); the tokens its earlier jobs took."""
    opening_item: dict | None = None
    triggered: bool = False
    item_of: Callable[[str], dict] | None = None
    usage: CompactionUsage | None = None


class ResponseEvents:
    def __init__(self, response: dict, *, summary: bool = False, parallel: bool = True,
                 logprobs: bool = False, tool_kinds: dict[str, ToolKind] | None = None,
                 seal: Callable[[str], str] | None = None, compaction: Compaction | None = None):
        self.response = response
        self.compaction = compaction or Compaction()
        self.summary_item: dict | None = None    # a trigger's compaction item, once its summary samples
        self.tool_kinds = tool_kinds or {}   # the name the model calls -> the tool it stands for
        self.seal = seal                     # seals reasoning into encrypted_content, when asked for
        self.summary = summary
        self.parallel = parallel
        self.with_logprobs = logprobs
        self.sequence = 0
        self.items: list[dict] = []          # output items in output_index order
        self.current: dict | None = None     # the open item
        self.pieces: list[str] = []          # the open item's text (or arguments) so far
        self.logprobs: list[dict] = []       # the open message's logprobs so far
        self.calls = 0                       # function calls started
        self.input = InputDecoder()          # the open custom call's input, decoded as it streams
        self.streamed_input = 0              # characters of it sent so far
        self.terminal = False

    @property
    def status(self) -> str:
        return self.response["status"]

    def event(self, kind: str, **fields) -> dict:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def snapshot(self) -> dict:
        return copy.deepcopy(self.response)

    # ---- lifecycle ------------------------------------------------------------------

    def opening(self) -> list[dict]:
        """response.created, then response.queued (background) or response.in_progress."""
        events = [self.event("response.created", response=self.snapshot())]
        kind = "response.queued" if self.status == "queued" else "response.in_progress"
        events.append(self.event(kind, response=self.snapshot()))
        if self.compaction.opening_item is not None:
            events += self._whole_item(self.compaction.opening_item)
        return events

    def started(self) -> list[dict]:
        """The runtime took the job: a queued response is now in progress."""
        if self.status != "queued":
            return []
        self.response["status"] = "in_progress"
        return [self.event("response.in_progress", response=self.snapshot())]

    def feed(self, event: object) -> list[dict]:
        if self.terminal:
            return []
        if isinstance(event, Context):
            return self.started()
        if self.compaction.triggered:
            return self._compacting(event)
        if isinstance(event, Chunk):
            if not event.text:
                return []
            return self._reasoning(event.text) if event.reasoning else self._text(event.text, event.logprobs)
        if isinstance(event, ToolCallStart):
            if self.calls and not self.parallel:
                return self.fail(PARALLEL_VIOLATION)
            return self._call_start(event)
        if isinstance(event, ToolCallDelta):
            return self._call_delta(event)
        return []

    def finish(self, output: GenerationOutput) -> list[dict]:
        if self.terminal:
            return []
        if not self.parallel and len(output.tool_calls) > 1:
            return self.fail(PARALLEL_VIOLATION)
        incomplete = output.finish_reason == "length" and not self.compaction.triggered   # a summary cut short is one
        final_arguments = {openai_call_id(call): call.arguments for call in output.tool_calls}
        events = self.started()
        if not self.items and not self.compaction.triggered:    # nothing generated: an (empty) message
            events += self._text("", None)
        status = "incomplete" if incomplete else "completed"
        if (open_call := self._open_call(output)) is not None:
            self.pieces = [open_call.arguments]
            if not open_call.complete:      # cut off by a stop string or the end of generation, or broken
                status = "incomplete"
        events += self._close(status)
        for item in self.items:
            if item["type"] in CALL_ITEMS and item["call_id"] in final_arguments:
                _set_arguments(item, final_arguments[item["call_id"]])
        self.response.update(
            status="incomplete" if incomplete else "completed",
            output=[copy.deepcopy(i) for i in self.items],
            usage=usage(output, self.compaction.usage),
            incomplete_details={"reason": "max_output_tokens"} if incomplete else None,
            completed_at=None if incomplete else int(time.time()),
        )
        self.terminal = True
        kind = "response.incomplete" if incomplete else "response.completed"
        return events + [self.event(kind, response=self.snapshot())]

    def _open_call(self, output: GenerationOutput) -> ToolCall | None:
        """The answer's call for the item open now, if that item is a call."""
        if self.current is None or self.current["type"] not in CALL_ITEMS:
            return None
        return next((c for c in output.tool_calls if openai_call_id(c) == self.current["call_id"]), None)

    def fail(self, message: str, code: str = "server_error") -> list[dict]:
        if self.terminal:
            return []
        events = self._close("incomplete")
        self.response.update(status="failed", output=[], error={"code": code, "message": message})
        self.terminal = True
        return events + [self.event("response.failed", response=self.snapshot())]

    def cancel(self) -> list[dict]:
        """Cancelled: close the open item; keep what was generated; no terminal event."""
        if self.terminal:
            return []
        events = self._close("incomplete")
        self.response.update(status="cancelled", output=[copy.deepcopy(i) for i in self.items])
        self.terminal = True
        return events

    # ---- items ----------------------------------------------------------------------

    def _whole_item(self, item: dict) -> list[dict]:
        """An item that is whole when it appears (a compaction): added and done at once."""
        events = self._close("completed")
        self.items.append(item)
        where = {"output_index": len(self.items) - 1}
        return events + [self.event("response.output_item.added", **where, item=copy.deepcopy(item)),
                         self.event("response.output_item.done", **where, item=copy.deepcopy(item))]

    def _compacting(self, event: object) -> list[dict]:
        """A trigger's job: its text is the summary, never shown; the compaction item opens as it
        samples (response.compaction.compacting) and is done, sealed, with the whole summary."""
        if isinstance(event, Chunk) and self.summary_item is None:
            self.summary_item = {"id": new_id("cmp"), "type": "compaction", "encrypted_content": ""}
            self.items.append(self.summary_item)
            return [self.event("response.output_item.added", output_index=len(self.items) - 1,
                               item=copy.deepcopy(self.summary_item))]
        if isinstance(event, Chunk):
            return [self.event("response.compaction.compacting", item_id=self.summary_item["id"],
                               output_index=len(self.items) - 1)]
        if not isinstance(event, Compacted):
            return []
        whole = self.compaction.item_of(event.summary)
        if self.summary_item is None:
            return self._whole_item(whole)
        self.summary_item["encrypted_content"] = whole["encrypted_content"]
        return [self.event("response.output_item.done", output_index=len(self.items) - 1,
                           item=copy.deepcopy(self.summary_item))]

    def _open(self, item: dict) -> list[dict]:
        events = self._close("completed")
        self.items.append(item)
        self.current, self.pieces, self.logprobs = item, [], []
        return events + [self.event("response.output_item.added", output_index=len(self.items) - 1,
                                    item=copy.deepcopy(item))]

    def _where(self) -> dict:
        return {"item_id": self.current["id"], "output_index": len(self.items) - 1}

    def _close(self, status: str) -> list[dict]:
        item = self.current
        if item is None:
            return []
        text = "".join(self.pieces)
        kind = item["type"]
        if kind == "message":
            events = self._close_message(text)
        elif kind == "reasoning":
            events = self._close_reasoning(text)
        else:
            events = self._close_call(text)
        item["status"] = status
        events.append(self.event("response.output_item.done", output_index=len(self.items) - 1,
                                 item=copy.deepcopy(item)))
        self.current, self.pieces, self.logprobs = None, [], []
        return events

    # message: output_text parts

    def _text(self, text: str, logprobs: list[dict] | None) -> list[dict]:
        events = []
        if self.current is None or self.current["type"] != "message":
            events += self._open({"id": new_id("msg"), "type": "message", "role": "assistant",
                                  "status": "in_progress", "content": []})
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            events.append(self.event("response.content_part.added", **self._where(), content_index=0,
                                     part=dict(part)))
            self.current["content"].append(part)
        entries = self._logprob_entries(logprobs)
        self.logprobs += entries
        self.pieces.append(text)
        if text:
            events.append(self.event("response.output_text.delta", **self._where(), content_index=0,
                                     delta=text, logprobs=entries))
        return events

    def _logprob_entries(self, logprobs: list[dict] | None) -> list[dict]:
        if not self.with_logprobs or not logprobs:
            return []
        return [{"token": e["token"], "logprob": e["logprob"], "bytes": e.get("bytes", []),
                 "top_logprobs": [{"token": t["token"], "logprob": t["logprob"], "bytes": t.get("bytes", [])}
                                  for t in e.get("top_logprobs", [])]} for e in logprobs]

    def _close_message(self, text: str) -> list[dict]:
        part = self.current["content"][0]
        part["text"], part["logprobs"] = text, self.logprobs
        where = self._where()
        return [self.event("response.output_text.done", **where, content_index=0, text=text,
                           logprobs=self.logprobs),
                self.event("response.content_part.done", **where, content_index=0, part=copy.deepcopy(part))]

    # reasoning: summary_text parts when a summary was asked for, else reasoning_text parts

    def _reasoning(self, text: str) -> list[dict]:
        events = []
        if self.current is None or self.current["type"] != "reasoning":
            item = {"id": new_id("rs"), "type": "reasoning", "status": "in_progress", "summary": []}
            if not self.summary:
                item["content"] = []
            events += self._open(item)
            if self.summary:
                events.append(self.event("response.reasoning_summary_part.added", **self._where(),
                                         summary_index=0, part={"type": "summary_text", "text": ""}))
            else:
                events.append(self.event("response.content_part.added", **self._where(), content_index=0,
                                         part={"type": "reasoning_text", "text": ""}))
        self.pieces.append(text)
        if self.summary:
            events.append(self.event("response.reasoning_summary_text.delta", **self._where(), summary_index=0,
                                     delta=text))
        else:
            events.append(self.event("response.reasoning_text.delta", **self._where(), content_index=0,
                                     delta=text))
        return events

    def _close_reasoning(self, text: str) -> list[dict]:
        where = self._where()
        if self.seal is not None:
            self.current["encrypted_content"] = self.seal(text)
        if self.summary:
            part = {"type": "summary_text", "text": text}
            self.current["summary"] = [part]
            return [self.event("response.reasoning_summary_text.done", **where, summary_index=0, text=text),
                    self.event("response.reasoning_summary_part.done", **where, summary_index=0, part=dict(part))]
        part = {"type": "reasoning_text", "text": text}
        self.current["content"] = [part]
        return [self.event("response.reasoning_text.done", **where, content_index=0, text=text),
                self.event("response.content_part.done", **where, content_index=0, part=dict(part))]

    # tool calls: a function call's arguments stream as generated, a custom call's input as
    # it decodes from them; a local shell call's action is whole when the call is

    def _call_start(self, start: ToolCallStart) -> list[dict]:
        self.calls += 1
        kind = self.tool_kinds.get(start.name, ToolKind("function", start.name))
        if kind.kind == "custom":
            item = {"id": new_id("ctc"), "type": "custom_tool_call", "status": "in_progress",
                    "call_id": openai_call_id(start), "name": kind.name, "input": ""}
        elif kind.kind == LOCAL_SHELL:
            item = {"id": new_id("lsh"), "type": "local_shell_call", "status": "in_progress",
                    "call_id": openai_call_id(start), "action": shell_action("")}
        else:
            item = {"id": new_id("fc"), "type": "function_call", "status": "in_progress",
                    "call_id": openai_call_id(start), "name": kind.name, "arguments": ""}
        if kind.namespace:
            item["namespace"] = kind.namespace
        self.input, self.streamed_input = InputDecoder(), 0
        return self._open(item)

    def _call_delta(self, delta: ToolCallDelta) -> list[dict]:
        item = self.current
        if item is None or item["type"] not in CALL_ITEMS or not delta.fragment:
            return []
        self.pieces.append(delta.fragment)
        if item["type"] == "function_call":
            return [self.event("response.function_call_arguments.delta", **self._where(), delta=delta.fragment)]
        if item["type"] == "custom_tool_call":
            return self._input_delta(self.input.feed(delta.fragment))
        return []

    def _input_delta(self, delta: str) -> list[dict]:
        if not delta:
            return []
        self.streamed_input += len(delta)
        return [self.event("response.custom_tool_call_input.delta", **self._where(), delta=delta)]

    def _close_call(self, arguments: str) -> list[dict]:
        item = self.current
        _set_arguments(item, arguments)
        if item["type"] == "function_call":
            return [self.event("response.function_call_arguments.done", **self._where(),
                               name=item["name"], arguments=arguments)]
        if item["type"] == "custom_tool_call":
            events = self._input_delta(item["input"][self.streamed_input:])     # what streamed begins it
            return events + [self.event("response.custom_tool_call_input.done", **self._where(),
                                        input=item["input"])]
        return []


def _set_arguments(item: dict, arguments: str) -> None:
    if item["type"] == "custom_tool_call":
        item["input"] = custom_input(arguments)
    elif item["type"] == "local_shell_call":
        item["action"] = shell_action(arguments)
    else:
        item["arguments"] = arguments
