"""Tool calls in generated text: a whole-text parser and a streaming projector over the
families' syntaxes (tool_families). Protocol-neutral: text in, content and calls out.

Strategy: each syntax is one incremental parser (tool_families), a generator over a shared
cursor (json_stream) that pauses (yields) whenever it needs more text and never pauses at end
of input. `ToolProjector` drives it as chunks arrive; `parse_generated_tools` is the same
projector fed the whole text at once, so the streamed and whole-text results agree by
construction. What keeps them agreeing under any chunking is that every decision looks only at
text, never at how much has arrived: a marker is matched only once no earlier marker could
still be completing, a search window is fixed, and the end of input is explicit.

A call that proves malformed (bad JSON, unknown name, missing markers) before its start
went out is rolled back: the marker that opened it becomes content and scanning resumes right
after it, so the call's whole text ends up in the content, exactly as it was generated. Calls
already completed in the same block stay. A call whose start has gone out (ToolCallStart, as
soon as its name is read) stays a call whatever follows, so that a stream never says the same
text twice: cut off at the end of the input (max_tokens, a stop string, end of generation) or
turned malformed, it ends there with the argument fragments it got (`complete` False), and
the projector is done, as after a block's end. What a parser had read of the call's text and
not yet passed on is nobody's.

Normalisation: a call's `arguments` is the generated JSON object less whitespace outside
strings (raw control characters inside strings escaped), and its streamed fragments
concatenate to exactly that. Whitespace right after a completed call is dropped (it only
separates calls); content before a call keeps its own, the caller may strip it.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass

from ..generation import Chunk, ToolCall, ToolCallDelta, ToolCallStart
from .json_stream import Cursor, Malformed, partial_start
from .tool_families import TOOL_SYNTAXES, ToolSyntax, new_call_id

# a call the model wrote without an id gets this many random letters and digits, no prefix:
# each dialect shows it in its own form (call_…, toolu_…)
NEUTRAL_ID_LENGTH = 24


Event = Chunk | ToolCallStart | ToolCallDelta     # content is never reasoning here


@dataclass(frozen=True)
class OpenCall:
    """A block of calls the projector has opened and not yet closed."""
    number: int     # blocks opened so far, this one included
    text: str       # its text so far, from its start marker on
    marker: str     # the marker that opened it ("{" for a bare object opening the message)


class _BlockDone(Exception):
    """A call or block ended and no further call can follow: generation may stop."""


ToolNames = Collection[str] | Mapping[str, dict | None] | None


class ToolProjector:
    """Streams generated text into content and tool calls.

    Text that cannot belong to a call is emitted as soon as possible; a possible partial start
    marker at the end is held back. `tool_names` limits the accepted names; a mapping from name
    to the tool's parameters schema also types qwen3_coder values by their schema (string
    parameters then stream at once and stay strings even when they look like numbers).
    After `done` the projector ignores further text: it is what the caller stops generating.
    `starts_inside`: the prompt ended with the family's start marker (functionary v3.2's
    generation prompt ends in ``>>>``), so the output may open with a call's name: the text is
    read as if the marker came first, and the marker is nobody's content when no call follows."""

    def __init__(self, syntax: ToolSyntax | str, tool_names: ToolNames = None, *,
                 parallel: bool = True, starts_inside: bool = False):
        self.syntax = TOOL_SYNTAXES[syntax] if isinstance(syntax, str) else syntax
        self._names = tool_names
        self._parallel = parallel
        self._cur = Cursor()
        markers = sorted(self.syntax.starts, key=len, reverse=True)
        # a marker that starts like a word (GigaChat 3's "function call<|role_sep|>") only starts one
        self._marker_re = re.compile("|".join(("(?<!\\w)" if _wordy(m[0]) else "") + re.escape(m)
                                              for m in markers)) if markers else None
        self._at_message_start = self.syntax.bare_object
        self._block: Iterator[None] | None = None
        self._block_start = self._commit = 0
        self._marker = ""
        self._named = False       # a call of the open block has been named (a listed tool)
        self._events: list[Event] = []
        self._calls: list[ToolCall] = []
        self._current: tuple[int, str, str, list[str], bool] | None = None
        self._next_index = 0
        self._blocks_opened = 0
        self._done = False
        self._phantom = 0         # the marker the prompt wrote, at the text's start: no one's content
        if starts_inside and self.syntax.starts:
            self._cur.text = self.syntax.starts[0]
            self._phantom = len(self._cur.text)

    @property
    def done(self) -> bool:
        return self._done

    @property
    def calls(self) -> list[ToolCall]:
        return list(self._calls)

    @property
    def open_call(self) -> OpenCall | None:
        """The block of calls open now, if any. Where a call opens, a strict call's grammar wakes.
        A bare object opening the message (Llama 3.x, the generic JSON) counts only once it has
        named one of the tools: until then it may as well be an answer in JSON."""
        if self._block is None or self._done or (self._marker == "{" and not self._named):
            return None
        return OpenCall(self._blocks_opened, self._cur.text[self._block_start:], self._marker)

    def feed(self, text: str) -> list[Event]:
        if self._done or self._cur.eof or not text:
            return []
        self._cur.text += text
        return self._run()

    def finish(self) -> list[Event]:
        if self._done or self._cur.eof:
            return []
        self._cur.eof = True
        return self._run()

    # --- the parsers call these ------------------------------------------------------------

    def start_call(self, name: str, call_id: str | None = None) -> None:
        if not name or (self._names is not None and name not in self._names):
            raise Malformed(f"unknown function {name!r}")
        self._named = True
        index, self._next_index = self._next_index, self._next_index + 1
        own = call_id or (self.syntax.new_id() if self.syntax.new_id else None)
        self._current = (index, own or new_call_id("", NEUTRAL_ID_LENGTH), name, [], own is None)
        self._events.append(ToolCallStart(index, self._current[1], name, minted=own is None))

    def add_arguments(self, fragment: str) -> None:
        if fragment and self._current:
            self._current[3].append(fragment)
            self._events.append(ToolCallDelta(self._current[0], fragment))

    def end_call(self) -> None:
        self._close_call(complete=True)
        self._commit = self._cur.pos  # a later failure in this block rolls back only to here
        if not self._parallel:
            raise _BlockDone

    def end_block(self) -> None:
        raise _BlockDone

    def parameter_type(self, function: str, parameter: str) -> str | None:
        """"string" if the parameter's schema says just that, "other" for any other schema,
        None when there is none."""
        if not isinstance(self._names, Mapping):
            return None
        schema = ((self._names.get(function) or {}).get("properties") or {}).get(parameter)
        if not isinstance(schema, dict):
            return None
        return "string" if schema.get("type") == "string" else "other"

    # --- driving ---------------------------------------------------------------------------

    def _run(self) -> list[Event]:
        while not self._done:
            if self._block is None:
                if not self._scan_content():
                    break
            elif not self._step_block():
                break
        if self._block is None:  # nothing can roll back into consumed text any more
            self._phantom = 0       # (the first block, which the marker opens, has ended)
            keep = max(0, self._cur.pos - 1)     # one character, to tell where a word starts
            self._cur.text = self._cur.text[keep:]
            self._cur.pos -= keep
        events, self._events = _merged(self._events), []
        return events

    def _scan_content(self) -> bool:
        """Emit content up to the next start marker and open a block there (True), or emit
        what is safe and wait for more text (False)."""
        cur = self._cur
        rest = cur.text[cur.pos:]
        if self._at_message_start:
            body = rest.lstrip()
            self._content(rest[:len(rest) - len(body)])
            cur.pos += len(rest) - len(body)
            if not body:
                return False
            self._at_message_start = False
            if body[0] == "{":
                return self._open_block("{")
            rest = body
        at = len(cur.text) - len(rest)
        found = self._marker_re.search(cur.text, at) if self._marker_re else None
        partial = None if cur.eof else self._partial_marker(at)
        if found and (partial is None or found.start() - at < partial):
            self._content(rest[:found.start() - at])
            cur.pos = found.start()
            return self._open_block(found.group())
        safe = len(rest) if partial is None else partial
        self._content(rest[:safe])
        cur.pos += safe
        return False

    def _partial_marker(self, at: int) -> int | None:
        """Where in the text from `at` a start marker may be beginning (it runs to the end), or
        None; a marker that starts like a word only where a word starts."""
        text, rest = self._cur.text, self._cur.text[at:]
        p = partial_start(rest, self.syntax.starts)
        while p is not None and _wordy(rest[p]) and at + p > 0 and _wordy(text[at + p - 1]):
            q = partial_start(rest[p + 1:], self.syntax.starts)
            p = None if q is None else p + 1 + q
        return p

    def _open_block(self, marker: str) -> bool:
        self._block_start = self._commit = self._cur.pos
        self._marker = marker
        self._named = False
        self._blocks_opened += 1
        self._block = self.syntax.parse(self._cur, self, marker)
        return True

    def _step_block(self) -> bool:
        """Run the block parser until it needs text (False) or is over (True)."""
        try:
            next(self._block)
            if not self._cur.eof:
                return False
            raise Malformed("paused at end of input")  # a parser bug must not lose text
        except StopIteration:
            self._block = None
        except _BlockDone:
            self._block, self._done = None, True
        except Malformed:
            self._block = None
            if self._current is not None:   # its start went out: a call it stays, cut where it broke
                self._close_call(complete=False)
                self._done = True
            elif self._commit > self._block_start:
                self._cur.pos = self._commit
            else:
                if self._block_start >= self._phantom:
                    self._content(self._marker)
                self._cur.pos = self._block_start + len(self._marker)
        return True

    def _close_call(self, complete: bool) -> None:
        _, call_id, name, fragments, minted = self._current
        self._calls.append(ToolCall(call_id, name, "".join(fragments), minted=minted, complete=complete))
        self._current = None

    def _content(self, text: str) -> None:
        if text:
            self._events.append(Chunk(False, text))


def _wordy(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _merged(events: list[Event]) -> list[Event]:
    """Adjacent content, or adjacent fragments of one call, as one event."""
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, Chunk) and isinstance(last, Chunk):
            out[-1] = Chunk(False, last.text + event.text)
        elif (isinstance(event, ToolCallDelta) and isinstance(last, ToolCallDelta)
              and last.index == event.index):
            out[-1] = ToolCallDelta(last.index, last.fragment + event.fragment)
        else:
            out.append(event)
    return out


def marker_prompt_opened(syntax: ToolSyntax, prompt: str) -> str:
    """The family's start marker the rendered prompt ends with, or "" (`starts_inside` if any)."""
    return next((marker for marker in syntax.starts if marker and prompt.endswith(marker)), "")


def parse_generated_tools(text: str, syntax: ToolSyntax | str, tool_names: ToolNames = None,
                          *, parallel: bool = True) -> tuple[str, list[ToolCall]]:
    """Split a whole generated text into content and well-formed calls; never raises on
    model output. Malformed calls stay in the content as the text the model wrote."""
    projector = ToolProjector(syntax, tool_names, parallel=parallel)
    events = projector.feed(text) + projector.finish()
    content = "".join(e.text for e in events if isinstance(e, Chunk))
    return content, projector.calls
