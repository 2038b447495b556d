"""GBNF text for llama.cpp's grammar sampler: the shared primitive rules and the few ways of
writing classes, groups and repetitions that every grammar here uses.

- Whitespace between JSON tokens is ``ws``: nothing, one space, or a newline and at most
  WS_MAX_INDENT spaces or tabs (llama.cpp's own json.gbnf caps it the same way), so a model
  can never stall by writing whitespace forever.
- Numbers have at most 15 integer digits, 15 fraction digits and a 2-digit exponent.
- Character classes are positive ranges of Unicode scalar values: llama.cpp lets a negated
  class match bytes that decode to no character. It still lets overlong UTF-8 through (E0
  80-9F .., F0 80-8F ..); the engine's errors="replace" decoding keeps such JSON parseable.
- Rule names use only [a-zA-Z0-9-]: llama.cpp's GBNF parser allows no underscore.
"""

from __future__ import annotations

import math
import re

from ..parsing.json_stream import compact
from .limits import MAX_GRAMMAR_REPEAT

WS_MAX_INDENT = 20
MAX_INT_DIGITS = 15
MAX_REPEAT = MAX_GRAMMAR_REPEAT  # llama.cpp's MAX_REPETITION_THRESHOLD: larger {m,n} counts are refused or dropped


class SchemaError(ValueError):
    """A JSON schema that is invalid, or that no grammar here can enforce exactly."""


PRIMITIVES = {
    "ws": f'| " " | "\\n" [ \\t]{{0,{WS_MAX_INDENT}}}',
    "keychar": r"[\x20-\x21\x23-\x5B\x5D-\uD7FF\uE000-\U0010FFFF]",  # no '"', '\' or controls
    "char": r'keychar | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )',
    "rawchar": r"[\x01-\x3B\x3D-\uD7FF\uE000-\U0010FFFF]",  # anything but '<'
    "string": r'"\"" char* "\""',
    "integer": r'"-"? ( "0" | [1-9] [0-9]{0,14} )',
    "number": r'"-"? ( "0" | [1-9] [0-9]{0,14} ) ( "." [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} )?',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "value": "object | array | string | number | boolean | null",
    "object": r'"{" ws ( member ( ws "," ws member )* ws )? "}"',
    "member": r'string ws ":" ws value',
    "array": r'"[" ws ( value ( ws "," ws value )* ws )? "]"',
}
# JSON Schema string formats the grammar can hold a string to (inside its quotes).
_DATE = r'[1-9] [0-9]{3} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] )'
_TIME = (r'( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? '
         r'( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )')
STRING_FORMATS = {"date": _DATE, "time": _TIME, "date-time": f'{_DATE} "T" {_TIME}',
                  "uuid": '[0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}'}

SCALARS = [(0x01, 0xD7FF), (0xE000, 0x10FFFF)]  # what a grammar may write: no NUL, no surrogates
KEY_CHARS = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, 0x10FFFF)]  # keychar's ranges
RULE_NAME = re.compile(r"[A-Za-z0-9-]+")


def json_text(value, path: str) -> str:
    """Compact JSON text for a value a grammar will write (orjson would write NaN as null: refused)."""
    if not _finite(value):
        raise SchemaError(f"{path}: {value!r} is not a JSON value")
    try:
        return compact(value)
    except TypeError as exc:      # orjson.JSONEncodeError: lone surrogates, non-string keys, huge ints
        raise SchemaError(f"{path}: {value!r} is not a JSON value ({exc})") from exc


def _finite(value) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def group(expr: str) -> str:
    return f"( {expr} )" if "|" in expr else expr


def repeat(item: str, lo: int, hi: int | None, path: str) -> str:
    if max(lo, hi or 0) > MAX_REPEAT:
        raise SchemaError(f"{path}: repetition counts above {MAX_REPEAT} are not supported")
    if hi == 0:
        return ""
    return f"{item}*" if (lo, hi) == (0, None) else f"{item}{{{lo},{'' if hi is None else hi}}}"


def subtract(ranges, holes) -> list[tuple[int, int]]:
    """Code point ranges less the holes (both lists of inclusive (first, last) pairs)."""
    out = []
    for a, b in ranges:
        for lo, hi in sorted(holes):
            if lo <= b and hi >= a:
                if lo > a:
                    out.append((a, lo - 1))
                a = hi + 1
        if a <= b:
            out.append((a, b))
    return out


def char_class(ranges) -> str:
    def char(cp: int) -> str:
        if chr(cp).isascii() and chr(cp).isalnum():
            return chr(cp)
        return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"
    return "[" + "".join(char(a) + (f"-{char(b)}" if b > a else "") for a, b in ranges) + "]"
