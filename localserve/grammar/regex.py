"""``pattern`` regexes as GBNF: a regex subset (classes, groups, alternation, quantifiers,
``^``/``$`` at the ends) translated over the characters as written in a JSON string, or as bare
text without '<'. Anything outside the subset raises SchemaError.
"""

from __future__ import annotations

import re
from typing import Protocol

from ..errors import shown
from .gbnf import RULE_NAME, SCALARS, SchemaError, char_class, repeat, subtract
from ..parsing.json_stream import compact
from .limits import MAX_GRAMMAR_NESTING, MAX_GRAMMAR_QUANTIFIERS, MAX_REPEAT_NESTING

UNBOUNDED_WEIGHT = 16   # what a '*' or '+' counts as in a product of nested repetition counts


class Rules(Protocol):
    """Where a translated pattern puts its helper rules (schema.GrammarBuilder is one)."""

    def literal(self, text: str) -> str: ...

    def add_rule(self, name: str, body: str) -> str: ...


def translate_pattern(builder: Rules, pattern: str, raw: bool, path: str) -> str:
    """GBNF matching the strings that ``pattern`` matches in full (helper rules go to builder)."""
    return _Regex(builder, pattern, raw, path).translate()


class _Regex:
    """A regex subset → GBNF over the characters as written in a JSON string (or, raw, as bare
    text without '<'). Full-string match; an end without ^ or $ is open (``char*``)."""

    _CLASSES = {"d": [(48, 57)], "w": [(48, 57), (65, 90), (95, 95), (97, 122)],
                "s": [(9, 13), (32, 32), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
                      (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]}  # as ECMA-262
    _ESCAPES = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "0": 0}

    def __init__(self, builder: Rules, pattern: str, raw: bool, path: str) -> None:
        self.b, self.p, self.raw, self.path, self.i, self.end = builder, pattern, raw, path, 0, False
        # Nested repetition costs llama.cpp's grammar the product of the counts at every
        # character ((a{0,2000}){0,2000}: seconds per token), and many in a row cost cubic time.
        self.nested = 1             # the largest product of repetition counts inside the group being read
        self.atom_nested = 1        # the same for the atom just read
        self.quantifiers = 0
        self.specials = [0x3C] if raw else [0x22, 0x5C, *range(0x20)]  # written otherwise or never
        self.encoded: dict[tuple, str] = {}   # (negated, ranges) -> GBNF: "." or "a" a thousand times is one encode

    def fail(self, what: str):
        raise SchemaError(f"{self.path}: {what} in {shown(self.p)!r} is not supported")

    def peek(self, n: int = 1) -> str:
        return self.p[self.i:self.i + n]

    def translate(self) -> str:
        start = self.p.startswith("^")
        self.i = int(start)
        branches = self.alternatives(0)
        if self.i != len(self.p):
            self.fail("an unbalanced ')'")
        if len(branches) > 1 and (start or self.end):
            self.fail("'^' or '$' with top-level alternation")
        anything = "rawchar*" if self.raw else "char*"
        return f"{'' if start else anything} ( {' | '.join(branches)} ) {'' if self.end else anything}"

    def alternatives(self, depth: int) -> list[str]:
        branches = [self.sequence(depth)]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence(depth))
        return branches

    def sequence(self, depth: int) -> str:
        items = []
        while self.peek() not in ("", "|", ")"):
            if self.peek() == "$" and depth == 0 and self.i == len(self.p) - 1:
                self.i, self.end = self.i + 1, True
            elif self.peek() in ("^", "$"):
                self.fail(f"{self.peek()!r} inside the pattern")
            else:
                items.append(self.quantified(self.atom(depth)))
        return " ".join(items)

    def atom(self, depth: int) -> str:
        c = self.p[self.i]
        self.i += 1
        if c == "(":
            if self.peek(2) == "?:":
                self.i += 2
            elif self.peek() == "?":
                self.fail("a lookaround, named group or inline flag")
            if depth >= MAX_GRAMMAR_NESTING:     # the walk recurses, and so does llama.cpp's parser
                self.fail(f"groups nested deeper than {MAX_GRAMMAR_NESTING} (MAX_GRAMMAR_NESTING)")
            outer, self.nested = self.nested, 1
            inner = self.alternatives(depth + 1)
            self.atom_nested, self.nested = self.nested, outer
            if self.peek() != ")":
                self.fail("an unbalanced '('")
            self.i += 1
            return f"( {' | '.join(inner)} )"
        self.atom_nested = 1
        if c == "[":
            return self.char_class()
        if c == ".":
            return self.encode(True, [(10, 10), (13, 13), (0x2028, 0x2029)])
        if c == "\\":
            return self.encode(*self.escape())
        if c in "*+?{)":
            self.fail(f"{c!r} with nothing to repeat")
        return self.encode(False, [(ord(c), ord(c))])

    def escape(self) -> tuple[bool, list[tuple[int, int]]]:
        c = self.peek()
        self.i += 1
        if c.lower() in self._CLASSES:
            return c.isupper(), self._CLASSES[c.lower()]
        if c in self._ESCAPES:
            return False, [(self._ESCAPES[c], self._ESCAPES[c])]
        digits = self.peek(2 if c == "x" else 4)
        if c in ("x", "u") and re.fullmatch("[0-9a-fA-F]{2,4}", digits) and len(digits) == (2 if c == "x" else 4):
            self.i += len(digits)
            return False, [(int(digits, 16), int(digits, 16))]
        if not c or c.isalnum():
            self.fail(f"the escape \\{c}")
        return False, [(ord(c), ord(c))]

    def char_class(self) -> str:
        negated = self.peek() == "^"
        self.i += negated
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            lo = self.class_atom()
            if len(lo) == 1 and self.peek() == "-" and self.peek(2) != "-]" and len(self.peek(2)) == 2:
                self.i += 1
                hi = self.class_atom()
                if len(hi) != 1 or hi[0][0] < lo[0][0]:
                    self.fail("a bad class range")
                lo = [(lo[0][0], hi[0][0])]
            ranges += lo
        self.i += 1
        return self.encode(negated, ranges)

    def class_atom(self) -> list[tuple[int, int]]:
        c = self.peek()
        self.i += 1
        if not c:
            self.fail("an unterminated '['")
        if c != "\\":
            return [(ord(c), ord(c))]
        negated, ranges = self.escape()
        if negated:
            self.fail("\\D, \\W or \\S inside a class")
        return ranges

    def quantified(self, atom: str) -> str:
        m = re.match(r"[*+?]|\{(\d+)(,(\d*))?\}", self.p[self.i:])
        if not m:
            self.nested = max(self.nested, self.atom_nested)
            return atom
        self.i += m.end()
        if m[1] is None:
            quant = m[0]
            count = UNBOUNDED_WEIGHT if m[0] in "*+" else 1
        else:
            lo = int(m[1])
            hi = lo if m[2] is None else (int(m[3]) if m[3] else None)
            if hi is not None and lo > hi:
                self.fail("a {m,n} with m > n")
            quant = repeat("", lo, hi, self.path)
            count = max(lo, 1) * UNBOUNDED_WEIGHT if hi is None else max(hi, 1)
            if hi == 0:
                return ""
        self.count_repetition(self.atom_nested * count)
        if self.peek() == "+":
            self.fail("a possessive quantifier")
        self.i += self.peek() == "?"  # lazy: the same language
        return (atom if RULE_NAME.fullmatch(atom) else self.b.add_rule("pattern", atom)) + quant

    def count_repetition(self, nested: int) -> None:
        self.quantifiers += 1
        if self.quantifiers > MAX_GRAMMAR_QUANTIFIERS:
            raise SchemaError(f"{self.path}: the pattern has more than {MAX_GRAMMAR_QUANTIFIERS} quantifiers "
                              f"(MAX_GRAMMAR_QUANTIFIERS)")
        if nested > MAX_REPEAT_NESTING:
            raise SchemaError(f"{self.path}: nested repetitions in {shown(self.p)!r} multiply to {nested} (a '*' or '+' "
                              f"counts {UNBOUNDED_WEIGHT}), over the limit of {MAX_REPEAT_NESTING} "
                              f"(MAX_REPEAT_NESTING)")
        self.nested = max(self.nested, nested)

    def encode(self, negated: bool, ranges: list[tuple[int, int]]) -> str:
        """GBNF for the characters of a set, as they are written in the string."""
        key = (negated, tuple(ranges))
        if key not in self.encoded:
            self.encoded[key] = self._encode(negated, ranges)
        return self.encoded[key]

    def _encode(self, negated: bool, ranges: list[tuple[int, int]]) -> str:
        chosen = subtract(SCALARS, ranges) if negated else subtract(ranges, [(0, 0), (0xD800, 0xDFFF)])
        if chosen and min(a for a, _ in chosen) > max(self.specials):     # most characters: nothing to escape
            return char_class(chosen)
        plain = subtract(chosen, [(cp, cp) for cp in self.specials])
        parts = [char_class(plain)] if plain else []
        if not self.raw:  # '"', '\' and controls appear as their JSON escapes
            parts += [self.b.literal(compact(chr(cp))[1:-1]) for cp in self.specials
                      if any(a <= cp <= b for a, b in chosen)]
        if not parts:
            self.fail("a character set that is empty here")
        return parts[0] if len(parts) == 1 else f"( {' | '.join(parts)} )"
