"""Reading text that arrives in pieces: a cursor over the text received so far, whose readers
are generators that pause (yield) whenever they need more text and never pause at the end of
the input, and one of them an incremental JSON value reader.

Every decision looks only at text, never at how much has arrived (a search window is fixed, the
end of input is explicit), so a reader's answer does not depend on how the text was chunked.
Text that is not what a reader expects raises Malformed.
"""

from __future__ import annotations

import orjson
from collections.abc import Callable, Collection, Iterator

from .json_prefix import JsonPrefix


class Malformed(Exception):
    """The text at hand is not what the reader expects: for a tool call, not a well-formed one."""


def strict_loads(text: str):
    """Strict JSON, as clients parse it: orjson refuses NaN/Infinity and raw control characters."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(str(exc)) from None


def compact(value) -> str:
    """Compact JSON text, non-ASCII written as itself."""
    return orjson.dumps(value).decode()


def partial_start(text: str, markers: Collection[str]) -> int | None:
    """Earliest index from which the rest of `text` is a proper prefix of some marker."""
    longest = max(map(len, markers), default=0)
    for i in range(max(0, len(text) - longest + 1), len(text)):
        tail = text[i:]
        if any(len(m) > len(tail) and m.startswith(tail) for m in markers):
            return i
    return None


class Cursor:
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
            raise Malformed(lit)

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
                raise Malformed(term)
            yield
        found = self.text[self.pos:idx]
        self.pos = idx + len(term) if consume else idx
        return found

    def json_value(self, sink: Callable[[str], None] | None = None) -> Iterator[None]:
        """One JSON value, returned compact (whitespace outside strings dropped, raw control
        characters inside strings escaped) and validated. Objects, arrays and strings are
        passed to `sink` piece by piece as they arrive, each piece checked first (json_prefix):
        what goes out is always the start of a JSON value, and where the text stops being
        one, what came before it goes out and the reader raises Malformed."""
        yield from self.wait(1)
        if self.char() in ("", "}", "]", ",", ":"):
            raise Malformed("value")
        if self.char() not in '{["':
            return (yield from self._json_scalar())
        out: list[str] = []
        grammar = JsonPrefix()
        while not grammar.complete:
            yield from self.wait(1)
            if self.pos >= len(self.text):
                raise Malformed("unterminated JSON")
            piece, i, text = [], self.pos, self.text
            while i < len(text) and not grammar.complete:
                ch = text[i]
                space = not grammar.in_string and ch.isspace()   # any space, as a model spaces JSON
                if not grammar.take(" " if space else ch):
                    if sink and piece:   # what came before went out, however the text was chunked
                        sink("".join(piece))
                    raise Malformed("JSON")
                i += 1
                if not space:
                    piece.append(compact(ch)[1:-1] if ch < " " else ch)   # only a string takes one
            self.pos = i
            fragment = "".join(piece)
            out.append(fragment)
            if sink and fragment:
                sink(fragment)
        value = "".join(out)
        try:
            strict_loads(value)
        except ValueError:
            raise Malformed("JSON") from None
        return value

    def _json_scalar(self) -> Iterator[None]:
        start = self.pos
        while True:
            yield from self.wait(1)
            ch = self.char()
            if not ch or ch.isspace() or ch in ",:]})":  # ")": a Python-style call's end
                break
            self.pos += 1
        try:
            return compact(strict_loads(self.text[start:self.pos]))
        except ValueError:
            raise Malformed("scalar") from None

    def json_string(self) -> Iterator[None]:
        yield from self.wait(1)
        if self.char() != '"':
            raise Malformed("string")
        return strict_loads((yield from self.json_value()))

    def json_key(self) -> Iterator[None]:
        """An object member's key and the colon after it, whitespace before each skipped."""
        yield from self.skip_ws()
        key = yield from self.json_string()
        yield from self.skip_ws()
        yield from self.expect(":")
        return key
