"""From generated token bytes to events: whole characters, stops, reasoning, tool calls.

Each stage is incremental and holds back only what it must: the UTF-8 decoder an
incomplete character, the stop matcher a possible start of a stop string, the
reasoning splitter a possible marker, the tool projector a possible call. The
runtime feeds one token's bytes at a time; every stage is pure and testable alone.
"""

from __future__ import annotations

import codecs
import dataclasses

from ..parsing.json_stream import partial_start
from ..generation import Chunk, GenerationRequest
from ..parsing.content_markup import MarkupFilter
from ..parsing.reasoning import ReasoningSplitter
from ..parsing.tools import OpenCall, ToolProjector


class StopMatcher:
    """Finds stop strings across token boundaries; text up to a stop is released, the stop never."""

    def __init__(self, stops: list[str]):
        self.stops = [s for s in stops if s]
        self.pending = ""
        self.matched: str | None = None

    def feed(self, text: str) -> str:
        if not self.stops:
            return text
        if self.matched is not None:
            return ""
        buffer = self.pending + text
        first: tuple[int, str] | None = None
        for stop in self.stops:
            at = buffer.find(stop)
            if at != -1 and (first is None or at < first[0]):
                first = (at, stop)
        if first is not None:
            self.matched = first[1]
            self.pending = ""
            return buffer[:first[0]]
        hold = self._held_suffix(buffer)
        self.pending = buffer[len(buffer) - hold:] if hold else ""
        return buffer[:len(buffer) - hold] if hold else buffer

    def _held_suffix(self, buffer: str) -> int:
        """Length of the longest tail of buffer that could begin a stop string."""
        start = partial_start(buffer, self.stops)
        return 0 if start is None else len(buffer) - start

    def flush(self) -> str:
        text, self.pending = self.pending, ""
        return text


class IndentLimit:
    """Ends the text before the first line (after a line break) indented by fewer than `minimum`
    spaces or tabs: a completion inside a block stops where the block does. Blank lines pass.
    While a new line's indentation is all there is, it is held back."""

    def __init__(self, minimum: int):
        self.minimum = minimum
        self.held = ""          # a line break and the indentation after it, not yet judged
        self.stopped = False

    def feed(self, text: str) -> str:
        if self.minimum <= 0:
            return text
        if self.stopped:
            return ""
        if not self.held and "\n" not in text:
            return text
        out = []
        for char in text:
            if not self.held:
                if char == "\n":
                    self.held = char
                else:
                    out.append(char)
            elif char in " \t":
                self.held += char
            elif char == "\n":         # a blank line: judged by the line after it
                out.append(self.held)
                self.held = char
            elif len(self.held) - 1 < self.minimum:
                self.stopped = True
                self.held = ""
                break
            else:
                out.append(self.held + char)
                self.held = ""
        return "".join(out)

    def flush(self) -> str:
        text, self.held = ("" if self.stopped else self.held), ""
        return text


class OutputPipeline:
    """Per-job text stages; collects the final content, reasoning and calls as it goes."""

    def __init__(self, request: GenerationRequest):
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.stops = StopMatcher(request.stop)
        self.indent = IndentLimit(request.min_indent)
        self.line_ended = False         # the last token's text held a line break
        self.splitter = ReasoningSplitter(request.reasoning, starts_inside=request.reasoning_starts_inside) \
            if request.reasoning is not None else None
        self.markup = MarkupFilter(request.content_markup) if request.content_markup else None
        tools = request.tools
        self.projector = ToolProjector(tools.syntax, tools.names, parallel=tools.parallel,
                                       starts_inside=tools.starts_inside) if tools else None
        self.content: list[str] = []
        self.reasoning: list[str] = []

    @property
    def stop_sequence(self) -> str | None:
        return self.stops.matched

    @property
    def indent_stopped(self) -> bool:
        return self.indent.stopped

    @property
    def in_reasoning(self) -> bool:
        return bool(self.splitter and self.splitter.in_reasoning)

    @property
    def tools_done(self) -> bool:
        return bool(self.projector and self.projector.done)

    @property
    def tool_calls(self) -> list:
        return self.projector.calls if self.projector else []

    def open_call(self) -> OpenCall | None:
        """The block of tool calls the model has opened, its text so far including what the
        stages before the projector still hold; None while no call is open, or while the output
        ends inside a character."""
        opened = self.projector.open_call if self.projector else None
        if opened is None or self.decoder.getstate()[0]:
            return None
        held = "".join(stage.held for stage in (self.markup, self.splitter) if stage) + self.stops.pending
        return dataclasses.replace(opened, text=opened.text + held)

    def feed(self, data: bytes) -> list:
        text = self.decoder.decode(data)
        self.line_ended = "\n" in text
        return self._after_decode(self.indent.feed(self.stops.feed(text))) if text else []

    def finish(self) -> list:
        text = self.decoder.decode(b"", final=True)
        events = self._after_decode(self.indent.feed(self.stops.feed(text)) if text else "")
        events += self._after_decode(self.indent.feed(self.stops.flush()) + self.indent.flush(), final=True)
        return events

    def _after_decode(self, text: str, final: bool = False) -> list:
        if self.splitter is None:
            pieces = [(False, text)] if text else []
        else:
            pieces = self.splitter.feed(text) if text else []
            if final:
                pieces += self.splitter.finish()
        events: list = []
        for is_reasoning, piece in pieces:
            if is_reasoning:
                self.reasoning.append(piece)
                events.append(Chunk(True, piece))
            else:
                events += self._project(self.markup.feed(piece) if self.markup else piece)
        if final and self.markup is not None:
            events += self._project(self.markup.finish())
        if final and self.projector is not None:
            events += self._projected(self.projector.finish())
        return events

    def _project(self, text: str) -> list:
        if not text:
            return []
        if self.projector is None:
            self.content.append(text)
            return [Chunk(False, text)]
        return self._projected(self.projector.feed(text))

    def _projected(self, events: list) -> list:
        """The projector speaks the runtime's events already; content is also collected."""
        kept = []
        for event in events:
            if isinstance(event, Chunk):
                if not event.text:
                    continue
                self.content.append(event.text)
            kept.append(event)
        return kept
