"""The tool-call families, each defined once: its markers, its parser and the shape of its
forced-call grammar, together in one ToolSyntax.

A parser is a generator over (cursor, sink, the start marker found) that reads a call or a
block of calls from the cursor and reports it to the sink (tools.ToolProjector: start_call,
add_arguments, end_call, end_block) as it goes. Text that proves no well-formed call raises
Malformed; the projector rolls it back. grammar/tool_grammars builds GBNF from CallsGrammar.
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from .call_format import CallFormat
from .json_stream import Cursor, Malformed, compact, strict_loads
from .parameter_values import read_parameter_value

_ALNUM = string.ascii_letters + string.digits


def new_call_id(prefix: str = "call_", length: int = 24) -> str:
    return prefix + "".join(secrets.choice(_ALNUM) for _ in range(length))


class CallSink(Protocol):
    """What a parser reports calls to (tools.ToolProjector)."""

    def start_call(self, name: str, call_id: str | None = None) -> None: ...

    def add_arguments(self, fragment: str) -> None: ...

    def end_call(self) -> None: ...

    def end_block(self) -> None: ...

    def parameter_type(self, function: str, parameter: str) -> str | None: ...


@dataclass(frozen=True)
class CallsGrammar:
    """How forced calls are written, for grammar/tool_grammars: the calls between `opening`
    and `closing`, separated by `separator`; each call is `before` + its arguments + `after`
    ({name} raw, {jname} as JSON). With `parameters`, the arguments are one
    <parameter=KEY> block each (qwen3_coder) instead of a JSON object."""
    opening: str
    separator: str
    closing: str
    before: str
    after: str
    parameters: bool = False
    one_call: bool = False             # even a parallel call is one call (harmony)


@dataclass(frozen=True)
class ToolSyntax:
    name: str
    starts: tuple[str, ...]            # markers that open a call or a block of calls
    end: str                           # closes a call/block; "" if the JSON itself ends it
    template_markers: tuple[str, ...]  # all present in a chat template -> this family
    parse: Callable[[Cursor, CallSink, str], Iterator[None]]
    grammar: CallsGrammar | CallFormat   # a CallFormat: derived from a template (format_parser)
    bare_object: bool = False          # a `{` opening the message also starts a call
    # the family's own id form for a call the model wrote without one (Mistral's nine
    # alphanumerics); None: the call gets a neutral id each dialect shows in its own form
    new_id: Callable[[], str] | None = None


def read_arguments(cur: Cursor, sink: Callable[[str], None]) -> Iterator[None]:
    """A call's arguments: a JSON object, streamed to `sink`; or, as some models write them,
    a JSON string holding the object, passed on once complete."""
    yield from cur.skip_ws()
    yield from cur.wait(1)
    if cur.char() == '"':
        try:
            decoded = strict_loads((yield from cur.json_string()))
        except ValueError:
            raise Malformed("arguments string") from None
        if not isinstance(decoded, dict):
            raise Malformed("arguments")
        sink(compact(decoded))
    elif cur.char() == "{":
        yield from cur.json_value(sink)
    else:
        raise Malformed("arguments")


_NAME_KEYS = ("name", "tool_name")                # Command R writes "tool_name"
_IGNORED_KEYS = ("id", "type", "tool_call_id")


def call_object(cur: Cursor, calls: CallSink, *, model_ids: bool = False,
                 first_key: str | None = None) -> Iterator[None]:
    """`{"name": ..., "arguments"|"parameters": {...}, "id": ...}`, keys in any order ("type"
    skipped). Any other key means this is no call, so JSON that merely answers the user flows
    on as content at once rather than when it ends. The call starts as soon as its name is
    read and its arguments stream; arguments written before the name wait for it.

    With `model_ids` (Mistral, whose calls carry the model's own id) the start waits for the
    arguments to begin, so that an id written before them is the call's. An id written after
    them comes too late: the client has had the start, with our id, and its arguments, and
    one call must keep one id from its first delta to the final message (streamed or not:
    both read the text the same way), so that later id is read and dropped. Holding the whole
    call for it instead would stall every argument fragment until the call's end."""
    if first_key is None:
        yield from cur.expect("{")
    name = call_id = held = None
    started = sent = False
    key = first_key
    while True:
        if key is None:
            key = yield from cur.json_key()
        yield from cur.skip_ws()
        if key in _NAME_KEYS and name is None:
            name = yield from cur.json_string()
            if not model_ids:
                calls.start_call(name)
                started = True
                if held is not None:
                    calls.add_arguments(held)
                    sent = True
        elif key in ("arguments", "parameters") and held is None and not sent:
            if model_ids and name is not None:
                calls.start_call(name, call_id)
                started = True
            if started:
                yield from read_arguments(cur, calls.add_arguments)
                sent = True
            else:
                parts: list[str] = []
                yield from read_arguments(cur, parts.append)
                held = "".join(parts)
        elif key == "id" and model_ids and not started:
            value = strict_loads((yield from cur.json_value()))
            call_id = value if isinstance(value, str) and value else None
        elif key in _IGNORED_KEYS:
            yield from cur.json_value()
        else:
            raise Malformed(f"key {key!r}")
        yield from cur.skip_ws()
        if not (yield from cur.accept(",")):
            yield from cur.expect("}")
            break
        key = None
    if name is None:
        raise Malformed("no name")
    if not started:
        calls.start_call(name, call_id)
    if not sent:
        calls.add_arguments(held if held is not None else "{}")


def _call_list(cur: Cursor, calls: CallSink, separator: str, *,
               model_ids: bool = False) -> Iterator[None]:
    """Call objects separated by `separator`, each complete (and committed) on its own."""
    while True:
        yield from cur.skip_ws()
        yield from call_object(cur, calls, model_ids=model_ids)
        calls.end_call()
        yield from cur.skip_ws()
        if not (yield from cur.accept(separator)):
            return


def parse_hermes(cur: Cursor, calls: CallSink, marker: str) -> Iterator[None]:
    yield from cur.expect(marker)
    yield from cur.skip_ws()
    yield from call_object(cur, calls)
    yield from cur.closing("</tool_call>")
    calls.end_call()
    yield from cur.skip_ws()


HERMES = ToolSyntax(
    "hermes", ("<tool_call>",), "</tool_call>", ("<tool_call>",), parse_hermes,
    CallsGrammar("", "\n", "", '<tool_call>\n{{"name": {jname}, "arguments": ', "}\n</tool_call>"))


def parse_qwen3_coder(cur: Cursor, calls: CallSink, marker: str) -> Iterator[None]:
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
        calls.add_arguments(separator + compact(key) + ":")
        separator = ","
        yield from read_parameter_value(cur, calls.add_arguments, calls.parameter_type(name, key))
    calls.add_arguments("{}" if separator == "{" else "}")
    yield from cur.closing("</function>")
    if wrapped:
        yield from cur.closing("</tool_call>")
    calls.end_call()
    yield from cur.skip_ws()


QWEN3_CODER = ToolSyntax(
    "qwen3_coder", ("<tool_call>", "<function="), "</tool_call>", ("<tool_call>", "<function="),
    parse_qwen3_coder,
    CallsGrammar("", "\n", "", "<tool_call>\n<function={name}>\n", "</function>\n</tool_call>",
                 parameters=True))


def parse_llama3(cur: Cursor, calls: CallSink, marker: str) -> Iterator[None]:
    """A bare object opening the message, or <|python_tag|> and objects; `;` separates."""
    if marker == "<|python_tag|>":
        yield from cur.expect(marker)
    yield from _call_list(cur, calls, ";")


LLAMA3 = ToolSyntax(
    "llama3", ("<|python_tag|>",), "", ("<|start_header_id|>", '"parameters"'), parse_llama3,
    CallsGrammar("", "; ", "", '{{"name": {jname}, "parameters": ', "}"), bare_object=True)


def parse_mistral(cur: Cursor, calls: CallSink, marker: str) -> Iterator[None]:
    """[TOOL_CALLS][{...}, ...] (each object may carry the model's id, see call_object) or
    the newer [TOOL_CALLS]NAME[ARGS]{...}, optionally NAME[CALL_ID]id[ARGS]{...}."""
    yield from cur.expect(marker)
    yield from cur.skip_ws()
    if (yield from cur.accept("[")):
        yield from _call_list(cur, calls, ",", model_ids=True)
        yield from cur.closing("]")
        calls.end_block()
    name = (yield from cur.until("[", 128)).strip()
    call_id = None
    if (yield from cur.accept("CALL_ID]")):
        call_id = (yield from cur.until("[", 64)).strip() or None
    yield from cur.expect("ARGS]")
    calls.start_call(name, call_id)
    yield from read_arguments(cur, calls.add_arguments)
    calls.end_call()
    yield from cur.skip_ws()


# Mistral templates insist on ids of exactly nine alphanumerics.
MISTRAL = ToolSyntax(
    "mistral", ("[TOOL_CALLS]",), "", ("[TOOL_CALLS]",), parse_mistral,
    CallsGrammar("[TOOL_CALLS][", ", ", "]", '{{"name": {jname}, "arguments": ', "}"),
    new_id=lambda: new_call_id("", 9))


DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
# After the separator: R1/V3 put the name and a ```json fence; V3.1 puts the object at once.
_DS_AFTER_SEP = re.compile(r"\s*([^\s`]*)\s*(```(?:json)?)?\s*")


def parse_deepseek(cur: Cursor, calls: CallSink, marker: str) -> Iterator[None]:
    in_block = yield from cur.accept(DS_CALLS_BEGIN)
    while True:
        yield from cur.skip_ws()
        yield from cur.expect(DS_CALL_BEGIN)
        before = (yield from cur.until(DS_SEP, 128)).strip()
        after = _DS_AFTER_SEP.fullmatch((yield from cur.until("{", 256, consume=False)))
        if not after:
            raise Malformed("deepseek head")
        if before == "function" and after[1]:
            name, fenced = after[1], bool(after[2])
        elif not after[1] and not after[2]:
            name, fenced = before, False
        else:
            raise Malformed("deepseek head")
        calls.start_call(name)
        yield from read_arguments(cur, calls.add_arguments)
        if fenced:
            yield from cur.closing("```")
        yield from cur.closing(DS_CALL_END)
        calls.end_call()
        yield from cur.skip_ws()
        if not in_block or (yield from cur.cut_off(DS_CALLS_END)):
            return
        if (yield from cur.accept(DS_CALLS_END)):
            calls.end_block()


DEEPSEEK = ToolSyntax(
    "deepseek", (DS_CALLS_BEGIN, DS_CALL_BEGIN), DS_CALLS_END, (DS_CALL_BEGIN,), parse_deepseek,
    CallsGrammar(DS_CALLS_BEGIN, "\n", DS_CALLS_END,
                 f"{DS_CALL_BEGIN}function{DS_SEP}{{name}}\n```json\n", f"\n```{DS_CALL_END}"))


# The recipient is written in the role header or after the channel; the content type after.
_HARMONY_HEAD = re.compile(
    r"(?:<\|start\|>assistant)?\s*(?:to=functions\.(?P<before>[^\s<]+)\s*)?"
    r"<\|channel\|>(?:commentary|analysis)(?:\s*to=functions\.(?P<after>[^\s<]+))?"
    r"\s*(?:<\|constrain\|>)?\s*(?:json)?\s*")


def parse_harmony(cur: Cursor, calls: CallSink, marker: str) -> Iterator[None]:
    head = _HARMONY_HEAD.fullmatch((yield from cur.until("<|message|>", 256)))
    if not head or not (head["before"] or head["after"]) or (head["before"] and head["after"]):
        raise Malformed("harmony header")
    calls.start_call(head["before"] or head["after"])
    yield from read_arguments(cur, calls.add_arguments)
    yield from cur.closing("<|call|>")
    calls.end_call()
    calls.end_block()  # <|call|> ends the assistant's turn


HARMONY = ToolSyntax(
    "harmony", ("<|start|>assistant", "<|channel|>", "to=functions."), "<|call|>",
    ("<|channel|>", "<|message|>"), parse_harmony,
    CallsGrammar("", "", "", "<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>",
                 "<|call|>", one_call=True))


def parse_json(cur: Cursor, calls: CallSink, marker: str) -> Iterator[None]:
    """The whole output as {"tool_calls": [call, ...]} or as a single call object."""
    yield from cur.expect("{")
    key = yield from cur.json_key()
    yield from cur.skip_ws()
    if key != "tool_calls":
        yield from call_object(cur, calls, first_key=key)
        calls.end_call()
        calls.end_block()
    yield from cur.expect("[")
    yield from _call_list(cur, calls, ",")
    yield from cur.expect("]")
    yield from cur.closing("}")
    calls.end_block()


JSON = ToolSyntax(
    "json", (), "", (), parse_json,
    CallsGrammar('{"tool_calls": [', ", ", "]}", '{{"name": {jname}, "arguments": ', "}"),
    bare_object=True)

# In detection order: the more specific families first.
TOOL_SYNTAXES: dict[str, ToolSyntax] = {s.name: s for s in (
    HARMONY, DEEPSEEK, MISTRAL, QWEN3_CODER, HERMES, LLAMA3, JSON)}


def detect_tool_syntax(chat_template: str | None) -> str:
    """The first family whose telltale markers all appear in the template; "json" if none."""
    for syntax in TOOL_SYNTAXES.values():
        if chat_template and syntax.template_markers and all(
                marker in chat_template for marker in syntax.template_markers):
            return syntax.name
    return "json"
