"""The streaming parser of a CallFormat (parsing/call_format), as a ToolSyntax.

It reads a block of calls as the format's literals describe it and reports each call to the
sink (tools.ToolProjector) as it goes: the name as soon as it is read, the arguments as they
stream (a JSON object in pieces; key/value pairs one pair at a time, so a call of two or more
arguments arrives in as many fragments).
"""

from __future__ import annotations

from collections.abc import Iterator

from .call_format import (KEY_SLOT, NAME_SLOT, OTHER, STRING, CallFormat, closing, first_word, match,
                          read_quoted, read_until, read_word, take_while, value_json)
from .json_stream import Cursor, Malformed, compact
from .tool_families import CallSink, ToolSyntax, call_object, read_arguments

# Characters no function name or key contains, so they end one even where the template's
# own marker after the name is missing.
_NAME_ENDS = ("{", "<", '"', "[", "(", ">", ",")
_RAW_VALUE_LIMIT = 1 << 16
_BARE_VALUE_LIMIT = 128      # a bare value's longest text (a number, true, None)


def format_syntax(name: str, fmt: CallFormat, template_markers: tuple[str, ...] = (),
                  new_id=None) -> ToolSyntax:
    def parse(cur: Cursor, calls: CallSink, marker: str) -> Iterator[None]:
        yield from _parse_block(fmt, cur, calls)
    return ToolSyntax(name, fmt.start_markers(), fmt.block_close.strip(), template_markers, parse, fmt,
                      new_id=new_id)


def _parse_block(fmt: CallFormat, cur: Cursor, calls: CallSink) -> Iterator[None]:
    """The block's opening, its calls, its close (calls.end_block: generation may stop)."""
    if not (yield from match(cur, fmt.block_open + fmt.call_open)):
        raise Malformed("opening")
    between, close = fmt.call_sep + fmt.call_open, fmt.block_close.strip()
    while True:
        yield from _READERS[fmt.layout](fmt, cur, calls)
        calls.end_call()
        if between.strip():
            if (yield from match(cur, between)):
                continue
            if close:
                if not (yield from closing(cur, fmt.block_close)):
                    raise Malformed("block close")
                calls.end_block()
            yield from cur.skip_ws()
            return
        # calls written back to back, nothing of their own between: the block's end, or another call
        if close and (yield from match(cur, fmt.block_close)):
            calls.end_block()
        yield from cur.skip_ws()
        if (yield from cur.cut_off(close)) or cur.pos == len(cur.text):
            return


def _end_of_call(cur: Cursor, literal: str) -> Iterator[None]:
    if not (yield from closing(cur, literal)):
        raise Malformed("call end")


def _read_object(fmt: CallFormat, cur: Cursor, calls: CallSink) -> Iterator[None]:
    yield from call_object(cur, calls)
    yield from _end_of_call(cur, fmt.call_end)


def _read_keyed(fmt: CallFormat, cur: Cursor, calls: CallSink) -> Iterator[None]:
    yield from cur.expect("{")
    calls.start_call((yield from cur.json_key()))
    yield from read_arguments(cur, calls.add_arguments)
    yield from cur.skip_ws()
    yield from cur.expect("}")
    yield from _end_of_call(cur, fmt.call_end)


def _read_json_args(fmt: CallFormat, cur: Cursor, calls: CallSink) -> Iterator[None]:
    name = yield from read_word(cur, (first_word(fmt.name_close), *_NAME_ENDS))
    calls.start_call(name)
    if not (yield from match(cur, fmt.name_close.replace(NAME_SLOT, name))):
        raise Malformed("after the name")
    yield from read_arguments(cur, calls.add_arguments)
    yield from _end_of_call(cur, fmt.call_end)


def _read_pairs(fmt: CallFormat, cur: Cursor, calls: CallSink) -> Iterator[None]:
    name = yield from read_word(cur, (first_word(fmt.name_close), first_word(fmt.zero_args), *_NAME_ENDS))
    calls.start_call(name)
    if fmt.zero_args.strip() and (yield from match(cur, fmt.zero_args.replace(NAME_SLOT, name))):
        calls.add_arguments("{}")
        return
    if not (yield from match(cur, fmt.name_close.replace(NAME_SLOT, name))):
        raise Malformed("after the name")
    before = "{"
    key_stops = tuple(first_word(lit) for lit in fmt.key_value) + _NAME_ENDS
    while True:
        key = yield from read_word(cur, key_stops)
        kind = yield from _value_kind(fmt, cur, key)
        schema = calls.parameter_type(name, key)
        wanted = kind if kind is not None else {"string": STRING, "other": OTHER}.get(schema)
        raw = yield from _raw_value(fmt, cur, STRING if kind is None else kind, key)
        calls.add_arguments(before + compact(key) + ":" + value_json(raw, wanted))
        before = ","
        slot = STRING if kind is None else kind
        next_key, end = (lit.replace(KEY_SLOT, key) for lit in (fmt.value_next[slot], fmt.value_end[slot]))
        # the longer first: the next key's opening may begin the call's end ("<" of "</invoke>")
        if len(end) > len(next_key) and (yield from match(cur, end)):
            break
        if (yield from match(cur, next_key)):
            continue
        yield from _end_of_call(cur, end)
        break
    calls.add_arguments("}")


def _value_kind(fmt: CallFormat, cur: Cursor, key: str) -> Iterator[None]:
    """The literal between a key and its value; where it differs by the value's type, which
    type it says (the longer literal tried first: one may begin the other)."""
    kinds = sorted((STRING, OTHER), key=lambda k: -len(fmt.key_value[k])) if fmt.typed_values else (STRING,)
    for kind in kinds:
        if (yield from match(cur, fmt.key_value[kind].replace(KEY_SLOT, key))):
            return kind if fmt.typed_values else None
    raise Malformed("after the key")


def _raw_value(fmt: CallFormat, cur: Cursor, kind: int, key: str) -> Iterator[None]:
    """A value's text: up to what ends it, less the newlines the template puts around it;
    where nothing but the next key or the call's end follows, one JSON value."""
    stop = first_word(fmt.value_stop(kind).replace(KEY_SLOT, key))
    if not stop:
        yield from cur.skip_ws()
        yield from cur.wait(1)
        if cur.char() in ('{', '[', '"'):
            return (yield from cur.json_value())
        bare = yield from take_while(cur, lambda ch: not ch.isspace() and ch not in ",)]}", _BARE_VALUE_LIMIT)
        if not bare:
            raise Malformed("value")
        return bare
    if stop in ("'", '"') and fmt.key_value[kind].endswith(stop):
        return (yield from read_quoted(cur, stop, _RAW_VALUE_LIMIT))   # a Python string literal
    raw = yield from read_until(cur, (stop,), _RAW_VALUE_LIMIT)
    if fmt.key_value[kind].endswith("\n") and raw.startswith("\n"):
        raw = raw[1:]
    if fmt.value_stop(kind).startswith("\n") and raw.endswith("\n"):
        raw = raw[:-1]
    return raw


_READERS = {"object": _read_object, "keyed": _read_keyed, "json_args": _read_json_args, "pairs": _read_pairs}
