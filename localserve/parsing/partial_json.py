"""A JSON object cut off part way (a tool call's arguments cut by max_tokens), closed best-effort
into the object it had begun, as Anthropic's SDK reads a streamed tool input (jiter's partial
mode): a member whose value was whole is kept, a key or a value cut off is left out (a string, a
literal, a number that cannot end there), and the arrays and objects still open are closed.
Where the text stops being JSON at all, what came before it is kept the same way.

Strategy: one pass over the text remembers the last point where a value had just ended (or a
container had just opened) and which containers were open there; that prefix, with their
closing brackets, is JSON.
"""

from __future__ import annotations

import re

import orjson

from .json_depth import nests_deeper

_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_CHARS = re.compile(r"[-+0-9.eE]*")
_WORD = re.compile(r"[a-z]*")
_LITERALS = ("true", "false", "null")
_SPACE = " \t\r\n"


def close_object(text: str) -> dict:
    """The object `text` is (a whole JSON object), or the one it had begun; {} when none."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        closed = closed_prefix(text)
        try:
            value = orjson.loads(closed) if closed else None
        except orjson.JSONDecodeError:   # a string's bad escape: the scan leaves strings to orjson
            value = None
    # too deep for the answer's writer (orjson writes 254 levels; a grammar can make a model write more): {}
    return value if isinstance(value, dict) and not nests_deeper(text, value) else {}


def closed_prefix(text: str) -> str:
    """The longest prefix of `text` that ends where a value ended or a container opened, with the
    brackets that close it; "" where no value began."""
    closers: list[str] = []   # the open containers' closing brackets, innermost last
    want = "value"            # what may come next: value, key, colon, more (a comma or a bracket), end
    may_close = False         # a container has just opened: its closing bracket may follow
    best = ""
    i = 0
    while i < len(text) and want != "end":
        ch = text[i]
        if ch in _SPACE:
            i += 1
            continue
        if closers and ch == closers[-1] and (want == "more" or may_close):
            closers.pop()
            i += 1
        elif want == "more" and ch == ",":
            want, may_close = ("key" if closers[-1] == "}" else "value"), False
            i += 1
            continue
        elif want == "colon" and ch == ":":
            want = "value"
            i += 1
            continue
        elif want == "key" and ch == '"':
            end = _string_end(text, i)
            if end is None:
                break
            want, may_close, i = "colon", False, end
            continue
        elif want == "value" and ch in "{[":
            closers.append("}" if ch == "{" else "]")
            want, may_close = ("key" if ch == "{" else "value"), True
            i += 1
            best = text[:i] + "".join(reversed(closers))
            continue
        elif want == "value" and (end := _scalar_end(text, i)) is not None:
            i = end
        else:
            break
        # a value has just ended (a scalar, or a container just closed)
        want, may_close = ("more" if closers else "end"), False
        best = text[:i] + "".join(reversed(closers))
    return best


def _string_end(text: str, start: int) -> int | None:
    """Where the string opening at `start` ends (after its closing quote); None if it never does."""
    i = start + 1
    while (i := text.find('"', i)) >= 0:
        escape = i
        while text[escape - 1] == "\\":
            escape -= 1
        if (i - escape) % 2 == 0:       # not itself escaped
            return i + 1
        i += 1
    return None


def _scalar_end(text: str, start: int) -> int | None:
    """Where the string, number or literal at `start` ends, if it is whole there; else None."""
    ch = text[start]
    if ch == '"':
        return _string_end(text, start)
    pattern, whole = (_NUMBER_CHARS, _NUMBER.fullmatch) if ch in "-0123456789" else (_WORD, _LITERALS.__contains__)
    end = pattern.match(text, start).end()
    return end if end > start and whole(text[start:end]) else None
