"""Tool calls in generated text: the syntaxes model families use, a whole-text parser and a
streaming projector. Protocol-neutral: text in, content and calls out.

Strategy: each syntax is one incremental parser, a generator over a shared `_Cursor` that
pauses (yields) whenever it needs more text and never pauses at end of input. `ToolProjector`
drives it as chunks arrive; `parse_generated_tools` is the same projector fed the whole text at
once, so the streamed and whole-text results agree by construction. What keeps them agreeing
under any chunking is that every decision looks only at text, never at how much has arrived:
a marker is matched only once no earlier marker could still be completing, a search window is
fixed, and the end of input is explicit.

A call that proves malformed (bad JSON, unknown name, missing markers) is rolled back: the
marker that opened it becomes content and scanning resumes right after it, so the call's
whole text ends up in the content, exactly as it was generated. Calls already completed in the
same block stay. In a stream, a call may already have sent its CallStart and some argument
fragments when it proves malformed; it is abandoned (never in `calls`) and its text follows as
content. The next call gets a fresh index.

Normalisation: a call's `arguments` is the generated JSON object less whitespace outside
strings (raw control characters inside strings escaped), and its streamed fragments
concatenate to exactly that. Whitespace right after a completed call is dropped (it only
separates calls); content before a call keeps its own, the caller may strip it.
"""

from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass

_ALNUM = string.ascii_letters + string.digits


def new_call_id(prefix: str = "call_", length: int = 24) -> str:
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(length))


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # a JSON object: the generated text less insignificant whitespace


@dataclass
class ContentDelta:
    text: str


@dataclass
class CallStart:
    index: int
    id: str
    name: str


@dataclass
class CallArguments:
    index: int
    fragment: str


Event = ContentDelta | CallStart | CallArguments


class _Malformed(Exception):
    """The text at hand is not a well-formed call."""


class _BlockDone(Exception):
    """A call or block ended and no further call can follow: generation may stop."""


def _loads(text: str):
    """Strict JSON: no NaN/Infinity, no raw control characters (clients parse strictly)."""
    def reject(constant):
        raise ValueError(constant)
    return json.loads(text, parse_constant=reject)


def _compact(value) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _partial_start(text: str, markers: Collection[str]) -> int | None:
    """Earliest index from which the rest of `text` is a proper prefix of some marker."""
    longest = max(map(len, markers), default=0)
    for i in range(max(0, len(text) - longest + 1), len(text)):
        tail = text[i:]
        if any(len(m) > len(tail) and m.startswith(tail) for m in markers):
            return i
    return None


class _Cursor:
    """The text received so far and a read position. Readers are generators."""

    def __init__(self) -> None:
        self.text = ""
        self.pos = 0
        self.eof = False

    def wait(self, n: int = 1) -> Iterator[None]:
        while len(self.text) - self.pos < n and not self.eof:
            yield

    def char(self) -> str:
        return self.text[self.pos:self.pos + 1]

    def accept(self, lit: str) -> Iterator[None]:
        yield from self.wait(len(lit))
        found = self.text.startswith(lit, self.pos)
        self.pos += len(lit) if found else 0
        return found

    def expect(self, lit: str) -> Iterator[None]:
        if not (yield from self.accept(lit)):
            raise _Malformed(lit)

    def skip_ws(self) -> Iterator[None]:
        while True:
            yield from self.wait(1)
            if not self.char().isspace():  # "" at end of input is not space
                return
            self.pos += 1

    def cut_off(self, lit: str) -> Iterator[None]:
        """Whether the input ends here with at most a beginning of `lit` (then consumed):
        generation often stops on a closing marker, which then never arrives as text."""
        yield from self.wait(len(lit))
        if self.eof and lit.startswith(self.text[self.pos:]):
            self.pos = len(self.text)
            return True
        return False

    def closing(self, lit: str) -> Iterator[None]:
        """A closing marker, also accepted cut off (even wholly) at the end of the input."""
        yield from self.skip_ws()
        if not (yield from self.cut_off(lit)):
            yield from self.expect(lit)

    def until(self, term: str, limit: int, consume: bool = True) -> Iterator[None]:
        """The text before `term`, which must start within `limit` characters. The window is
        fixed so that the answer never depends on how much text has arrived."""
        window = limit + len(term)
        while (idx := self.text.find(term, self.pos, self.pos + window)) < 0:
            if self.eof or len(self.text) - self.pos >= window:
                raise _Malformed(term)
            yield
        found = self.text[self.pos:idx]
        self.pos = idx + len(term) if consume else idx
        return found

    def json_value(self, sink: Callable[[str], None] | None = None) -> Iterator[None]:
        """One JSON value, returned compact (whitespace outside strings dropped, raw control
        characters inside strings escaped) and validated. Objects, arrays and strings are
        passed to `sink` piece by piece as they arrive."""
        yield from self.wait(1)
        if self.char() in ("", "}", "]", ",", ":"):
            raise _Malformed("value")
        if self.char() not in '{["':
            return (yield from self._json_scalar())
        out: list[str] = []
        stack: list[str] = []
        in_string = escaped = complete = False
        while not complete:
            yield from self.wait(1)
            if self.pos >= len(self.text):
                raise _Malformed("unterminated JSON")
            piece, i, text = [], self.pos, self.text
            while i < len(text) and not complete:
                ch = text[i]
                i += 1
                if in_string:
                    if escaped:
                        escaped = False
                    elif ch == "\\":
                        escaped = True
                    elif ch == '"':
                        in_string, complete = False, not stack
                    elif ch < " ":
                        ch = json.dumps(ch)[1:-1]
                elif ch == '"':
                    in_string = True
                elif ch in "{[":
                    stack.append("}" if ch == "{" else "]")
                elif ch in "}]":
                    if not stack or stack.pop() != ch:
                        raise _Malformed("bracket")
                    complete = not stack
                elif ch.isspace():
                    continue
                piece.append(ch)
            self.pos = i
            fragment = "".join(piece)
            out.append(fragment)
            if sink and fragment:
                sink(fragment)
        value = "".join(out)
        try:
            _loads(value)
        except ValueError:
            raise _Malformed("JSON") from None
        return value

    def _json_scalar(self) -> Iterator[None]:
        start = self.pos
        while True:
            yield from self.wait(1)
            ch = self.char()
            if not ch or ch.isspace() or ch in ",:]}":
                break
            self.pos += 1
        try:
            return _compact(_loads(self.text[start:self.pos]))
        except ValueError:
            raise _Malformed("scalar") from None

    def json_string(self) -> Iterator[None]:
        yield from self.wait(1)
        if self.char() != '"':
            raise _Malformed("string")
        return _loads((yield from self.json_value()))


# --- syntax parsers: generators over (cursor, projector, the start marker found) ----------

def _read_arguments(cur: _Cursor, sink: Callable[[str], None]) -> Iterator[None]:
    """A call's arguments: a JSON object, streamed to `sink`; or, as some models write them,
    a JSON string holding the object, passed on once complete."""
    yield from cur.skip_ws()
    yield from cur.wait(1)
    if cur.char() == '"':
        try:
            decoded = _loads((yield from cur.json_string()))
        except ValueError:
            raise _Malformed("arguments string") from None
        if not isinstance(decoded, dict):
            raise _Malformed("arguments")
        sink(_compact(decoded))
    elif cur.char() == "{":
        yield from cur.json_value(sink)
    else:
        raise _Malformed("arguments")


def _call_object(cur: _Cursor, calls: ToolProjector, *, defer: bool = False,
                 first_key: str | None = None) -> Iterator[None]:
    """`{"name": ..., "arguments"|"parameters": {...}, "id": ...}`, keys in any order ("type"
    skipped). Any other key means this is no call, so JSON that merely answers the user flows
    on as content at once rather than when it ends. The call starts as soon as its name is
    read and its arguments stream; arguments written before the name wait for it. With
    `defer` the whole object is read first, so that an id written after the arguments
    (Mistral's order) can be used."""
    if first_key is None:
        yield from cur.expect("{")
    name = call_id = held = None
    started = sent = False
    key = first_key
    while True:
        if key is None:
            yield from cur.skip_ws()
            key = yield from cur.json_string()
            yield from cur.skip_ws()
            yield from cur.expect(":")
        yield from cur.skip_ws()
        if key == "name" and name is None:
            name = yield from cur.json_string()
            if not defer:
                calls.start_call(name)
                started = True
                if held is not None:
                    calls.add_arguments(held)
                    sent = True
        elif key in ("arguments", "parameters") and held is None and not sent:
            if started:
                yield from _read_arguments(cur, calls.add_arguments)
                sent = True
            else:
                parts: list[str] = []
                yield from _read_arguments(cur, parts.append)
                held = "".join(parts)
        elif key == "id" and defer:
            value = _loads((yield from cur.json_value()))
            call_id = value if isinstance(value, str) and value else None
        elif key in ("id", "type"):
            yield from cur.json_value()
        else:
            raise _Malformed(f"key {key!r}")
        yield from cur.skip_ws()
        if not (yield from cur.accept(",")):
            yield from cur.expect("}")
            break
        key = None
    if name is None:
        raise _Malformed("no name")
    if not started:
        calls.start_call(name, call_id)
    if not sent:
        calls.add_arguments(held if held is not None else "{}")


def _call_list(cur: _Cursor, calls: ToolProjector, separator: str, *,
               defer: bool = False) -> Iterator[None]:
    """Call objects separated by `separator`, each complete (and committed) on its own."""
    while True:
        yield from cur.skip_ws()
        yield from _call_object(cur, calls, defer=defer)
        calls.end_call()
        yield from cur.skip_ws()
        if not (yield from cur.accept(separator)):
            return


def _parse_hermes(cur: _Cursor, calls: ToolProjector, marker: str) -> Iterator[None]:
    yield from cur.expect(marker)
    yield from cur.skip_ws()
    yield from _call_object(cur, calls)
    yield from cur.closing("</tool_call>")
    calls.end_call()
    yield from cur.skip_ws()


_PARAM_END = "</parameter>"
_NUMBER_PREFIX = re.compile(r"-?\d*(?:\.\d*)?(?:[eE][+-]?\d*)?")


def _could_be_json(raw: str, strings: bool) -> bool:
    """Whether a parameter value, seen so far, might still turn out a JSON value (a JSON
    string only if `strings`)."""
    core = raw.strip()
    return (not core or core[0] in ('[{"' if strings else "[{")
            or bool(_NUMBER_PREFIX.fullmatch(core))
            or any(literal.startswith(core) for literal in ("true", "false", "null")))


def _param_json(raw: str, strings: bool) -> str:
    try:
        value = _loads(raw)
    except ValueError:
        value = raw
    if isinstance(value, str) and not strings:
        value = raw
    return _compact(value)


def _take_value_text(cur: _Cursor) -> tuple[str, bool]:
    """The value text that is safe to pass on now, and whether the closing tag was reached.
    Held back: a possible partial closing tag and a newline before it (maybe the last)."""
    rest = cur.text[cur.pos:]
    end = rest.find(_PARAM_END)
    if end < 0 and cur.eof:
        raise _Malformed(_PARAM_END)
    cut = end if end >= 0 else _partial_start(rest, (_PARAM_END,))
    piece = rest if cut is None else rest[:cut]
    piece = piece[:-1] if piece.endswith("\n") else piece
    cur.pos += end + len(_PARAM_END) if end >= 0 else len(piece)
    return piece, end >= 0


def _qwen_value(cur: _Cursor, calls: ToolProjector, schema_type: str | None) -> Iterator[None]:
    """A <parameter> value: raw text up to </parameter>, less one newline at each end.

    How it becomes JSON follows the parameter's schema, as llama.cpp does: type "string", the
    raw text as a string; another type, the JSON the text parses as (a quoted string too),
    else the raw text; no schema, the JSON only if it is no string (a string parameter may
    well start with a quote). String text streams as it comes; text that might still be JSON
    waits for the closing tag."""
    yield from cur.accept("\n")
    strings = schema_type == "other"
    held, streaming = "", schema_type == "string"
    if streaming:
        calls.add_arguments('"')
    while True:
        piece, last = _take_value_text(cur)
        if not streaming:
            held += piece
            if last:
                calls.add_arguments(_param_json(held, strings))
                return
            if not _could_be_json(held, strings):
                streaming, piece = True, held
                calls.add_arguments('"')
        if streaming:
            calls.add_arguments(json.dumps(piece, ensure_ascii=False)[1:-1] + ('"' if last else ""))
        if last:
            return
        yield


def _parse_qwen3_coder(cur: _Cursor, calls: ToolProjector, marker: str) -> Iterator[None]:
    wrapped = marker == "<tool_call>"
    if wrapped:
        yield from cur.expect(marker)
        yield from cur.skip_ws()
    yield from cur.expect("<function=")
    name = (yield from cur.until(">", 128)).strip()
    calls.start_call(name)
    separator = "{"
    while True:
        yield from cur.skip_ws()
        if not (yield from cur.accept("<parameter=")):
            break
        key = (yield from cur.until(">", 128)).strip()
        calls.add_arguments(separator + json.dumps(key, ensure_ascii=False) + ":")
        separator = ","
        yield from _qwen_value(cur, calls, calls.parameter_type(name, key))
    calls.add_arguments("{}" if separator == "{" else "}")
    yield from cur.closing("</function>")
    if wrapped:
        yield from cur.closing("</tool_call>")
    calls.end_call()
    yield from cur.skip_ws()


def _parse_llama3(cur: _Cursor, calls: ToolProjector, marker: str) -> Iterator[None]:
    """A bare object opening the message, or <|python_tag|> and objects; `;` separates."""
    if marker == "<|python_tag|>":
        yield from cur.expect(marker)
    yield from _call_list(cur, calls, ";")


def _parse_mistral(cur: _Cursor, calls: ToolProjector, marker: str) -> Iterator[None]:
    """[TOOL_CALLS][{...}, ...] (ids follow the arguments, so each call is read whole) or
    the newer [TOOL_CALLS]NAME[ARGS]{...}, optionally NAME[CALL_ID]id[ARGS]{...}."""
    yield from cur.expect(marker)
    yield from cur.skip_ws()
    if (yield from cur.accept("[")):
        yield from _call_list(cur, calls, ",", defer=True)
        yield from cur.closing("]")
        calls.end_block()
    name = (yield from cur.until("[", 128)).strip()
    call_id = None
    if (yield from cur.accept("CALL_ID]")):
        call_id = (yield from cur.until("[", 64)).strip() or None
    yield from cur.expect("ARGS]")
    calls.start_call(name, call_id)
    yield from _read_arguments(cur, calls.add_arguments)
    calls.end_call()
    yield from cur.skip_ws()


_DS_CALLS_BEGIN, _DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN, _DS_CALL_END, _DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
# After the separator: R1/V3 put the name and a ```json fence; V3.1 puts the object at once.
_DS_AFTER_SEP = re.compile(r"\s*([^\s`]*)\s*(```(?:json)?)?\s*")


def _parse_deepseek(cur: _Cursor, calls: ToolProjector, marker: str) -> Iterator[None]:
    in_block = yield from cur.accept(_DS_CALLS_BEGIN)
    while True:
        yield from cur.skip_ws()
        yield from cur.expect(_DS_CALL_BEGIN)
        before = (yield from cur.until(_DS_SEP, 128)).strip()
        after = _DS_AFTER_SEP.fullmatch((yield from cur.until("{", 256, consume=False)))
        if not after:
            raise _Malformed("deepseek head")
        if before == "function" and after[1]:
            name, fenced = after[1], bool(after[2])
        elif not after[1] and not after[2]:
            name, fenced = before, False
        else:
            raise _Malformed("deepseek head")
        calls.start_call(name)
        yield from _read_arguments(cur, calls.add_arguments)
        if fenced:
            yield from cur.closing("```")
        yield from cur.closing(_DS_CALL_END)
        calls.end_call()
        yield from cur.skip_ws()
        if not in_block or (yield from cur.cut_off(_DS_CALLS_END)):
            return
        if (yield from cur.accept(_DS_CALLS_END)):
            calls.end_block()


# The recipient is written in the role header or after the channel; the content type after.
_HARMONY_HEAD = re.compile(
    r"(?:<\|start\|>assistant)?\s*(?:to=functions\.(?P<before>[^\s<]+)\s*)?"
    r"<\|channel\|>(?:commentary|analysis)(?:\s*to=functions\.(?P<after>[^\s<]+))?"
    r"\s*(?:<\|constrain\|>)?\s*(?:json)?\s*")


def _parse_harmony(cur: _Cursor, calls: ToolProjector, marker: str) -> Iterator[None]:
    head = _HARMONY_HEAD.fullmatch((yield from cur.until("<|message|>", 256)))
    if not head or not (head["before"] or head["after"]) or (head["before"] and head["after"]):
        raise _Malformed("harmony header")
    calls.start_call(head["before"] or head["after"])
    yield from _read_arguments(cur, calls.add_arguments)
    yield from cur.closing("<|call|>")
    calls.end_call()
    calls.end_block()  # <|call|> ends the assistant's turn


def _parse_json(cur: _Cursor, calls: ToolProjector, marker: str) -> Iterator[None]:
    """The whole output as {"tool_calls": [call, ...]} or as a single call object."""
    yield from cur.expect("{")
    yield from cur.skip_ws()
    key = yield from cur.json_string()
    yield from cur.skip_ws()
    yield from cur.expect(":")
    yield from cur.skip_ws()
    if key != "tool_calls":
        yield from _call_object(cur, calls, first_key=key)
        calls.end_call()
        calls.end_block()
    yield from cur.expect("[")
    yield from _call_list(cur, calls, ",")
    yield from cur.expect("]")
    yield from cur.closing("}")
    calls.end_block()


@dataclass(frozen=True)
class ToolSyntax:
    name: str
    starts: tuple[str, ...]            # markers that open a call or a block of calls
    end: str                           # closes a call/block; "" if the JSON itself ends it
    template_markers: tuple[str, ...]  # all present in a chat template -> this family
    parse: Callable[[_Cursor, "ToolProjector", str], Iterator[None]]
    bare_object: bool = False          # a `{` opening the message also starts a call
    new_id: Callable[[], str] = new_call_id


# In detection order: the more specific families first.
TOOL_SYNTAXES: dict[str, ToolSyntax] = {s.name: s for s in (
    ToolSyntax("harmony", ("<|start|>assistant", "<|channel|>", "to=functions."), "<|call|>",
               ("<|channel|>", "<|message|>"), _parse_harmony),
    ToolSyntax("deepseek", (_DS_CALLS_BEGIN, _DS_CALL_BEGIN), _DS_CALLS_END,
               (_DS_CALL_BEGIN,), _parse_deepseek),
    # Mistral templates insist on ids of exactly nine alphanumerics.
    ToolSyntax("mistral", ("[TOOL_CALLS]",), "", ("[TOOL_CALLS]",), _parse_mistral,
               new_id=lambda: new_call_id("", 9)),
    ToolSyntax("qwen3_coder", ("<tool_call>", "<function="), "</tool_call>",
               ("<tool_call>", "<function="), _parse_qwen3_coder),
    ToolSyntax("hermes", ("<tool_call>",), "</tool_call>", ("<tool_call>",), _parse_hermes),
    ToolSyntax("llama3", ("<|python_tag|>",), "", ("<|start_header_id|>", '"parameters"'),
               _parse_llama3, bare_object=True),
    ToolSyntax("json", (), "", (), _parse_json, bare_object=True),
)}


def detect_tool_syntax(chat_template: str | None) -> str:
    """The first family whose telltale markers all appear in the template; "json" if none."""
    for syntax in TOOL_SYNTAXES.values():
        if chat_template and syntax.template_markers and all(
                marker in chat_template for marker in syntax.template_markers):
            return syntax.name
    return "json"


ToolNames = Collection[str] | Mapping[str, dict | None] | None


class ToolProjector:
    """Streams generated text into content and tool calls.

    Text that cannot belong to a call is emitted as soon as possible; a possible partial start
    marker at the end is held back. `tool_names` limits the accepted names; a mapping from name
    to the tool's parameters schema also types qwen3_coder values by their schema (string
    parameters then stream at once and stay strings even when they look like numbers).
    After `done` the projector ignores further text: it is what the caller stops generating."""

    def __init__(self, syntax: ToolSyntax | str, tool_names: ToolNames = None, *,
                 parallel: bool = True):
        self.syntax = TOOL_SYNTAXES[syntax] if isinstance(syntax, str) else syntax
        self._names = tool_names
        self._parallel = parallel
        self._cur = _Cursor()
        markers = sorted(self.syntax.starts, key=len, reverse=True)
        self._marker_re = re.compile("|".join(map(re.escape, markers))) if markers else None
        self._at_message_start = self.syntax.bare_object
        self._block: Iterator[None] | None = None
        self._block_start = self._commit = 0
        self._marker = ""
        self._events: list[Event] = []
        self._calls: list[ToolCall] = []
        self._current: tuple[int, str, str, list[str]] | None = None
        self._next_index = 0
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    @property
    def calls(self) -> list[ToolCall]:
        return list(self._calls)

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
            raise _Malformed(f"unknown function {name!r}")
        index, self._next_index = self._next_index, self._next_index + 1
        self._current = (index, call_id or self.syntax.new_id(), name, [])
        self._events.append(CallStart(index, self._current[1], name))

    def add_arguments(self, fragment: str) -> None:
        if fragment and self._current:
            self._current[3].append(fragment)
            self._events.append(CallArguments(self._current[0], fragment))

    def end_call(self) -> None:
        _, call_id, name, fragments = self._current
        self._calls.append(ToolCall(call_id, name, "".join(fragments)))
        self._current = None
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
            self._cur.text = self._cur.text[self._cur.pos:]
            self._cur.pos = 0
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
        found = self._marker_re.search(rest) if self._marker_re else None
        partial = None if cur.eof else _partial_start(rest, self.syntax.starts)
        if found and (partial is None or found.start() < partial):
            self._content(rest[:found.start()])
            cur.pos += found.start()
            return self._open_block(found.group())
        safe = len(rest) if partial is None else partial
        self._content(rest[:safe])
        cur.pos += safe
        return False

    def _open_block(self, marker: str) -> bool:
        self._block_start = self._commit = self._cur.pos
        self._marker = marker
        self._block = self.syntax.parse(self._cur, self, marker)
        return True

    def _step_block(self) -> bool:
        """Run the block parser until it needs text (False) or is over (True)."""
        try:
            next(self._block)
            if not self._cur.eof:
                return False
            raise _Malformed("paused at end of input")  # a parser bug must not lose text
        except StopIteration:
            self._block = None
        except _BlockDone:
            self._block, self._done = None, True
        except _Malformed:
            self._block, self._current = None, None
            if self._commit > self._block_start:
                self._cur.pos = self._commit
            else:
                self._content(self._marker)
                self._cur.pos = self._block_start + len(self._marker)
        return True

    def _content(self, text: str) -> None:
        if text:
            self._events.append(ContentDelta(text))


def _merged(events: list[Event]) -> list[Event]:
    """Adjacent content, or adjacent fragments of one call, as one event."""
    out: list[Event] = []
    for event in events:
        last = out[-1] if out else None
        if isinstance(event, ContentDelta) and isinstance(last, ContentDelta):
            out[-1] = ContentDelta(last.text + event.text)
        elif (isinstance(event, CallArguments) and isinstance(last, CallArguments)
              and last.index == event.index):
            out[-1] = CallArguments(last.index, last.fragment + event.fragment)
        else:
            out.append(event)
    return out


def parse_generated_tools(text: str, syntax: ToolSyntax | str, tool_names: ToolNames = None,
                          *, parallel: bool = True) -> tuple[str, list[ToolCall]]:
    """Split a whole generated text into content and well-formed calls; never raises on
    model output. Malformed calls stay in the content as the text the model wrote."""
    projector = ToolProjector(syntax, tool_names, parallel=parallel)
    events = projector.feed(text) + projector.finish()
    content = "".join(e.text for e in events if isinstance(e, ContentDelta))
    return content, projector.calls
