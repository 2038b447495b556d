"""A tool-call format described by the literal text around its parts, as a chat template
renders a call (parsing/derive_family finds the pieces), and the one streaming parser that
reads any such format.

Four layouts of a call:
- "object": a JSON object naming the function and holding its arguments
  (`<tool_call>{"name": …, "arguments": {…}}</tool_call>`, `[{"tool_name": …, "parameters": …}]`);
- "keyed": `{"NAME": {arguments}}`;
- "json_args": the name in markup, then the arguments as a JSON object
  (`functions.NAME:0<|tool_call_argument_begin|>{…}`);
- "pairs": the name in markup, then one key/value pair per argument in markup
  (`<arg_key>K</arg_key><arg_value>V</arg_value>`, `<parameter name="K">V</parameter>`, …).

Literals are matched loosely, as models vary where templates do not matter: a whitespace run
in a literal matches any whitespace (or none), a digit run any digits (call indices), ID_SLOT
a call id, KEY_SLOT the current argument's key (`<city>…</city>`).
"""

from __future__ import annotations

import ast
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

from .json_stream import Cursor, Malformed, compact, partial_start, strict_loads

NAME_SLOT, KEY_SLOT, ID_SLOT = "\ue000", "\ue001", "\ue002"
STRING, OTHER = 0, 1                 # indices of the per-value-type literals

_PIECES = re.compile(r"(\s+)|(\d+)|(\ue002)|([^\s\d\ue002]+)")
_NAME_LIMIT = 128
_PYTHON_LITERALS = {"True": "true", "False": "false", "None": "null"}   # Python-style calls' values
_VALUE_LIMIT = 1 << 20               # a raw argument value's longest text


@dataclass(frozen=True)
class CallFormat:
    layout: str                      # "object" | "keyed" | "json_args" | "pairs"
    block_open: str                  # before the first call
    call_open: str                   # before each call (its name or its object)
    call_sep: str                    # between one call's end and the next call_open
    block_close: str                 # after the last call
    call_end: str = ""               # object, keyed, json_args: after the arguments
    name_close: str = ""             # json_args: NAME → '{'; pairs: NAME → the first key
    zero_args: str = ""              # pairs: NAME → the call's end, with no arguments
    key_value: tuple[str, str] = ("", "")   # pairs: KEY → value, for a string / other value
    value_next: tuple[str, str] = ("", "")  # pairs: value → the next key
    value_end: tuple[str, str] = ("", "")   # pairs: the last value → the call's end
    object_head: str = ""            # object/keyed: the object's text before the arguments
    object_tail: str = ""            # object/keyed: and after them

    @property
    def typed_values(self) -> bool:
        """Whether the markup says a value's type (else the parameter's schema decides)."""
        return self.key_value[STRING] != self.key_value[OTHER]

    def value_stop(self, kind: int) -> str:
        """What ends a raw value: the text that both its successors start with."""
        return common_start(self.value_next[kind], self.value_end[kind])

    def start_markers(self) -> tuple[str, ...]:
        """The text that opens a block: the opening's first word; a plain word (GigaChat 3's
        `function call<|role_sep|>`) runs on to the first markup, so that prose using the word
        opens no call (and wakes no strict grammar), and only text that may still become the
        marker is held back."""
        words = _words((self.block_open + self.call_open).strip())
        if not words or words[0][0] != "text":
            return ()
        marker = words[0][1]
        if marker.isalpha():
            for kind, text in words[1:]:
                if kind not in ("ws", "text"):
                    break
                marker += text
                if kind == "text" and not text.isalpha():
                    break
        return (marker,)


def common_start(a: str, b: str) -> str:
    """The longest common prefix, cut back to the end of a whole marker or word."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    if n < min(len(a), len(b)) or len(a) != len(b):
        while n and not (a[n - 1].isspace() or a[n - 1] in ">]})\"'"):
            n -= 1
    return a[:n]


def _words(literal: str) -> list[tuple[str, str]]:
    kinds = ("ws", "digits", "id", "text")
    return [(kinds[m.lastindex - 1], m.group()) for m in _PIECES.finditer(literal)]


def first_word(literal: str) -> str:
    """The leading fixed text of a literal, after whitespace: what starts it for a search."""
    for kind, text in _words(literal):
        if kind != "ws":
            return text if kind == "text" else ""
    return ""


def match(cur: Cursor, literal: str) -> Iterator[None]:
    """Consume `literal`, loosely, and say True; or consume nothing and say False."""
    start = cur.pos
    for kind, text in _words(literal):
        if kind == "ws":
            yield from cur.skip_ws()
            continue
        if kind == "text":
            found = yield from cur.accept(text)
        else:
            allowed = str.isdigit if kind == "digits" else _is_id_char
            found = bool((yield from take_while(cur, allowed, 64)))
        if not found:
            cur.pos = start
            return False
    return True


def _is_id_char(ch: str) -> bool:
    return ch.isalnum() or ch in "_-"


def take_while(cur: Cursor, allowed, limit: int) -> Iterator[None]:
    start = cur.pos
    while True:
        yield from cur.wait(1)
        ch = cur.char()
        if not ch or not allowed(ch):
            return cur.text[start:cur.pos]
        if cur.pos - start >= limit:
            raise Malformed("too long")
        cur.pos += 1


def closing(cur: Cursor, literal: str) -> Iterator[None]:
    """A closing literal, also accepted cut off (even wholly) at the end of the input:
    generation often stops on a closing marker, which then never arrives as text."""
    if (yield from match(cur, literal)):
        return True
    yield from cur.skip_ws()
    rest, want = "".join(cur.text[cur.pos:].split()), "".join(literal.split())
    if cur.eof and want.startswith(rest):
        cur.pos = len(cur.text)
        return True
    return False


def read_until(cur: Cursor, stops: tuple[str, ...], limit: int) -> Iterator[None]:
    """The text before the earliest of `stops` (not consumed), which must begin within `limit`
    characters; decided only once no earlier stop could still be completing."""
    stops = tuple(s for s in stops if s)
    while True:
        rest = cur.text[cur.pos:cur.pos + limit + max(map(len, stops))]
        found = [i for i in (rest.find(s) for s in stops) if i >= 0]
        at = min(found) if found else None
        partial = None if cur.eof else partial_start(rest, stops)
        if at is not None and (partial is None or at <= partial):
            if at > limit:
                raise Malformed("too long")
            cur.pos += at
            return rest[:at]
        if cur.eof or len(rest) > limit + max(map(len, stops)) - 1:
            raise Malformed("no end")
        yield


def read_quoted(cur: Cursor, quote: str, limit: int) -> Iterator[None]:
    """A Python string literal's body up to its closing `quote` (not consumed), its escapes read as
    Python reads them (``\\'``, ``\\\\``, ``\\n``, ``\\u00e9``): Python-style calls (LFM2) quote
    their string values."""
    start = at = cur.pos
    while True:
        yield from cur.wait(at - cur.pos + 2)
        ch = cur.text[at:at + 1]
        if not ch:
            raise Malformed("no end")
        if ch == quote:
            break
        at += 2 if ch == "\\" else 1
        if at - start > limit:
            raise Malformed("too long")
    body = cur.text[start:at]
    cur.pos = at
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")      # an unknown escape (\p) stays as written, as in Python
            value = ast.literal_eval(quote + body.replace("\n", "\\n") + quote)  # (a raw newline too)
    except (ValueError, SyntaxError):     # a broken escape (\x4): the text as written
        return body
    return value if isinstance(value, str) else body


def read_word(cur: Cursor, stops: tuple[str, ...]) -> Iterator[None]:
    """A function name or an argument key: up to whitespace or the first of `stops`."""
    start = cur.pos
    stops = tuple(s for s in stops if s)
    while True:
        yield from cur.wait(max(map(len, stops), default=1))
        rest = cur.text[cur.pos:]
        if not rest or rest[0].isspace() or any(rest.startswith(s) for s in stops):
            break
        if not cur.eof and any(len(s) > len(rest) and s.startswith(rest) for s in stops):
            yield
            continue
        cur.pos += 1
        if cur.pos - start > _NAME_LIMIT:
            raise Malformed("name too long")
    word = cur.text[start:cur.pos]
    if not word:
        raise Malformed("no name")
    return word


def value_json(raw: str, kind: int | None) -> str:
    """A raw argument value as JSON: a string value as itself; another value the JSON it
    reads as, else its text as a string. kind None: the schema said nothing either way, so
    JSON that parses is taken as such unless it is a string (a value may well start with
    a quote)."""
    if kind == STRING:
        return compact(raw)
    try:
        value = strict_loads(_PYTHON_LITERALS.get(raw, raw))
    except ValueError:
        return compact(raw)
    return compact(raw if kind is None and isinstance(value, str) else value)
