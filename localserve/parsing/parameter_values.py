"""A qwen3_coder `<parameter=KEY>` value: the raw text up to `</parameter>`, passed on as the
JSON the parameter's schema calls for (streamed when it is a string)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from .json_stream import Cursor, Malformed, compact, partial_start, strict_loads

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
        value = strict_loads(raw)
    except ValueError:
        value = raw
    if isinstance(value, str) and not strings:
        value = raw
    return compact(value)


def _take_value_text(cur: Cursor) -> tuple[str, bool]:
    """The value text that is safe to pass on now, and whether the closing tag was reached.
    Held back: a possible partial closing tag and a newline before it (maybe the last)."""
    rest = cur.text[cur.pos:]
    end = rest.find(_PARAM_END)
    cut = end if end >= 0 else partial_start(rest, (_PARAM_END,))
    piece = rest if cut is None else rest[:cut]
    piece = piece[:-1] if piece.endswith("\n") else piece
    cur.pos += end + len(_PARAM_END) if end >= 0 else len(piece)
    return piece, end >= 0


def read_parameter_value(cur: Cursor, add_arguments: Callable[[str], None], schema_type: str | None) -> Iterator[None]:
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
        add_arguments('"')
    while True:
        piece, last = _take_value_text(cur)
        if not streaming:
            held += piece
            if last:
                add_arguments(_param_json(held, strings))
                return
            if not _could_be_json(held, strings):
                streaming, piece = True, held
                add_arguments('"')
        if streaming:
            add_arguments(compact(piece)[1:-1] + ('"' if last else ""))
        if last:
            return
        if cur.eof:     # cut off: the value's text so far went out as it would have in pieces
            raise Malformed(_PARAM_END)
        yield
