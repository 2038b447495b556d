"""A custom tool call's `input`, decoded from its arguments as they stream.

The model writes a custom call as the arguments {"input":"..."} (compact: the tool projector
drops insignificant whitespace). While the arguments open that way, each fragment is scanned
once and the string's characters go out as soon as they are whole (an escape can straddle two
fragments), so a patch of thousands of lines streams in time linear in its length; the input
is that string, whatever follows it, and where it breaks off (the output ran out of tokens, or
an escape is not JSON) the input is what was whole until there. Arguments of another shape
stream nothing: at the end their `input` member is the input if they have one, else their
raw text. Either way what streamed is the start of the final input.
"""

from __future__ import annotations

import re

from ...parsing.json_stream import strict_loads
from .tools import CUSTOM_INPUT

OPENING = '{"' + CUSTOM_INPUT + '":"'
_SPECIAL = re.compile(r'["\\\x00-\x1f]')       # what ends a plain run inside a JSON string
_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_HEX = frozenset("0123456789abcdefABCDEF")


class InputDecoder:
    """Feed a custom call's argument fragments in order; each feed returns the input it makes whole."""

    def __init__(self):
        self._head = ""             # the arguments' start, until it shows whether they open with OPENING
        self._tail = ""             # an escape not yet whole
        self.opened = False         # the arguments open with OPENING: their string is the input
        self.closed = False         # nothing more can come: the string ended or broke, or another shape
        self._decoded: list[str] = []

    @property
    def text(self) -> str:
        """The input decoded so far."""
        return "".join(self._decoded)

    def feed(self, fragment: str) -> str:
        if self.closed:
            return ""
        if not self.opened:
            self._head += fragment
            if not (self._head.startswith(OPENING) or OPENING.startswith(self._head)):
                self.closed = True
            if self.closed or len(self._head) < len(OPENING):
                return ""
            self.opened = True
            fragment, self._head = self._head[len(OPENING):], ""
        text = self._decode(self._tail + fragment)
        if text:
            self._decoded.append(text)
        return text

    def _decode(self, buffer: str) -> str:
        out: list[str] = []
        self._tail = ""
        i, n = 0, len(buffer)
        while i < n:
            special = _SPECIAL.search(buffer, i)
            if special is None:
                out.append(buffer[i:])
                break
            j = special.start()
            out.append(buffer[i:j])
            if buffer[j] != "\\":       # the closing quote, or a raw control character (not JSON)
                self.closed = True
                break
            step, char = _escape(buffer, j)
            if step == 0:               # not whole yet: wait for the next fragment
                self._tail = buffer[j:]
                break
            if char is None:            # not JSON from here: the input ends where it was whole
                self.closed = True
                break
            out.append(char)
            i = j + step
        return "".join(out)


def _escape(buffer: str, at: int) -> tuple[int, str | None]:
    """The escape at buffer[at] (a backslash): (its length, its character); (0, None) when it is
    not whole yet, (n, None) when it is not JSON."""
    if at + 1 >= len(buffer):
        return 0, None
    kind = buffer[at + 1]
    if kind in _ESCAPES:
        return 2, _ESCAPES[kind]
    if kind != "u":
        return 2, None
    code = _hex4(buffer, at + 2)
    if code is None:
        return 0, None
    if code < 0 or 0xDC00 <= code <= 0xDFFF:     # a low surrogate alone: strict JSON refuses it
        return 6, None
    if not 0xD800 <= code <= 0xDBFF:
        return 6, chr(code)
    marker = buffer[at + 6:at + 8]              # a high surrogate: its low half must follow
    if marker != "\\u"[:len(marker)]:
        return 6, None
    low = _hex4(buffer, at + 8) if len(marker) == 2 else None
    if low is None:
        return 0, None
    if not 0xDC00 <= low <= 0xDFFF:
        return 6, None
    return 12, chr(0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00))


def _hex4(buffer: str, at: int) -> int | None:
    """Four hex digits at buffer[at]: their value; None when fewer have come, -1 when not hex."""
    digits = buffer[at:at + 4]
    if not all(c in _HEX for c in digits):
        return -1
    return int(digits, 16) if len(digits) == 4 else None


def custom_input(arguments: str) -> str:
    """A custom call's text from the arguments the model wrote: the `input` string (the raw
    arguments when the model wrote something else); what InputDecoder streamed begins it."""
    decoder = InputDecoder()
    decoder.feed(arguments)
    if decoder.opened:
        return decoder.text
    try:
        value = strict_loads(arguments)
    except ValueError:
        return arguments
    if isinstance(value, dict) and isinstance(value.get(CUSTOM_INPUT), str):
        return value[CUSTOM_INPUT]
    return arguments
