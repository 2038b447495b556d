"""A Lark grammar (as OpenAI custom tools carry them) as one regular expression.

Custom tools may constrain their text input with a grammar in Lark syntax. The grammar
sampler here takes JSON-schema string patterns (regex.py), so a Lark grammar whose
rules do not recurse — Codex's apply_patch grammar is one — is flattened into a regex by
inlining every rule into `start`. What cannot be flattened (a recursive rule, `%ignore`,
regex flags, an unknown import) raises LarkError naming it; the caller turns that into a 400.

Strategy: split the text into definitions (a line `name:` starts one, lines starting with
`|` continue it, `%` lines are directives), tokenize each body, and read it with a small
recursive-descent parser straight into regex text.
"""

from __future__ import annotations

import re

from .limits import MAX_GRAMMAR_BYTES, MAX_GRAMMAR_NESTING

__all__ = ["LarkError", "lark_to_regex"]


class LarkError(ValueError):
    """A Lark grammar this server cannot turn into a constraint."""


# Terminals of Lark's `common` library that a grammar may import.
COMMON = {
    "LF": r"\n", "CR": r"\r", "NEWLINE": r"(?:\r?\n)+", "WS": r"[ \t\f\r\n]+", "WS_INLINE": r"[ \t]+",
    "DIGIT": r"[0-9]", "HEXDIGIT": r"[0-9a-fA-F]", "INT": r"[0-9]+", "SIGNED_INT": r"[+-]?[0-9]+",
    "DECIMAL": r"(?:[0-9]+\.[0-9]*|\.[0-9]+)", "LETTER": r"[A-Za-z]", "LCASE_LETTER": r"[a-z]",
    "UCASE_LETTER": r"[A-Z]", "WORD": r"[A-Za-z]+", "CNAME": r"[_A-Za-z][_A-Za-z0-9]*",
    "NUMBER": r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", "ESCAPED_STRING": r'"(?:[^"\\]|\\.)*"',
}

_DEFINITION = re.compile(r"\s*[?!]?([A-Za-z_][A-Za-z_0-9]*)(?:\.-?\d+)?\s*:(.*)", re.S)
_TOKEN = re.compile(r"""
    \s+ | //[^\n]*
  | (?P<string>"(?:\\.|[^"\\])*"i?)
  | (?P<regex>/(?:\\.|[^/\\\n])+/[imslux]*)
  | (?P<op>->|\.\.|[:|()\[\]?*+~])
  | (?P<number>\d+)
  | (?P<name>[?!]?[A-Za-z_][A-Za-z_0-9]*)
""", re.X)
_IMPORT = re.compile(r"%import\s+common\s*(?:\.\s*(\w+)(?:\s*->\s*(\w+))?|\(([\w\s,]*)\))\s*$")
MAX_REPEAT_COUNT = 1000   # a Lark '~' count: lower than llama.cpp's own threshold, as it may nest


def lark_to_regex(text: str, where: str = "grammar") -> str:
    """A Python-style regex matching exactly the language of the Lark grammar's `start` rule."""
    if not isinstance(text, str) or not text.strip():
        raise LarkError(f"{where}: the grammar is empty")
    definitions = _definitions(text, where)
    if "start" not in definitions:
        raise LarkError(f"{where}: the grammar has no 'start' rule")
    return _Flattener(definitions, where).rule("start")


def _definitions(text: str, where: str) -> dict[str, str]:
    definitions: dict[str, str] = {}
    current: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("//"):
            continue
        if stripped.startswith("%"):
            current = None
            _directive(stripped, definitions, f"{where} line {number}")
            continue
        if stripped.startswith("|") and current is not None:
            definitions[current] += " " + stripped
            continue
        found = _DEFINITION.fullmatch(line)
        if found is None:
            raise LarkError(f"{where} line {number}: expected 'name: ...', got {stripped[:40]!r}")
        current = found.group(1)
        if current in definitions:
            raise LarkError(f"{where} line {number}: '{current}' is defined twice")
        definitions[current] = found.group(2)
    return definitions


def _directive(line: str, definitions: dict[str, str], where: str) -> None:
    found = _IMPORT.fullmatch(line)
    if found is None:
        kind = line.split()[0]
        raise LarkError(f"{where}: {kind} is not supported (only %import common.NAME)")
    names = [(found.group(1), found.group(2) or found.group(1))] if found.group(1) else \
        [(n.strip(), n.strip()) for n in found.group(3).split(",") if n.strip()]
    for name, alias in names:
        if name not in COMMON:
            raise LarkError(f"{where}: common.{name} is not a known terminal")
        definitions[alias] = f"/{COMMON[name]}/"


class _Flattener:
    def __init__(self, definitions: dict[str, str], where: str) -> None:
        self.definitions = definitions
        self.where = where
        self.done: dict[str, str] = {}
        self.active: list[str] = []
        self.tokens: list[tuple[str, str]] = []
        self.i = 0
        self.depth = 0          # groups and rules open one inside another: the walk recurses

    def fail(self, what: str) -> LarkError:
        return LarkError(f"{self.where}: {what}")

    def rule(self, name: str) -> str:
        bare = name.lstrip("?!")
        if bare in self.done:
            return self.done[bare]
        if bare in self.active:
            cycle = " -> ".join(self.active[self.active.index(bare):] + [bare])
            raise self.fail(f"rule '{bare}' is recursive ({cycle}); only non-recursive grammars are supported")
        if bare not in self.definitions:
            raise self.fail(f"'{bare}' is used but never defined")
        if len(self.active) >= MAX_GRAMMAR_NESTING:
            raise self.fail(f"rules nest deeper than {MAX_GRAMMAR_NESTING} (MAX_GRAMMAR_NESTING)")
        self.active.append(bare)
        saved = self.tokens, self.i
        self.tokens, self.i = _tokenize(self.definitions[bare], f"{self.where}: rule '{bare}'"), 0
        body = self.alternatives()
        if self.i != len(self.tokens):
            raise self.fail(f"rule '{bare}': unexpected {self.tokens[self.i][1]!r}")
        self.tokens, self.i = saved
        self.active.pop()
        # Every use of a rule is a copy of it: thirty rules that each use the next twice made 2**30.
        if len(body) > MAX_GRAMMAR_BYTES:
            raise self.fail(f"rule '{bare}' flattens to more than {MAX_GRAMMAR_BYTES} characters of regex "
                            f"(MAX_GRAMMAR_BYTES); each use of a rule copies it")
        self.done[bare] = f"(?:{body})"
        return self.done[bare]

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else ("end", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        self.i += 1
        return token

    def alternatives(self) -> str:
        branches = [self.sequence()]
        while self.peek() == ("op", "|"):
            self.i += 1
            branches.append(self.sequence())
        return "|".join(branches)

    def sequence(self) -> str:
        items = []
        while self.peek()[0] != "end" and self.peek()[1] not in ("|", ")", "]"):
            if self.peek() == ("op", "->"):   # an alias names the tree node: no effect on the text
                self.i += 1
                if self.take()[0] != "name":
                    raise self.fail("'->' must be followed by a name")
                continue
            items.append(self.quantified(self.atom()))
        return "".join(items)

    def atom(self) -> str:
        kind, text = self.take()
        if kind == "op" and text in ("(", "["):
            if self.depth >= MAX_GRAMMAR_NESTING:
                raise self.fail(f"groups nest deeper than {MAX_GRAMMAR_NESTING} (MAX_GRAMMAR_NESTING)")
            self.depth += 1
            inner = self.alternatives()
            self.depth -= 1
            closing = ")" if text == "(" else "]"
            if self.take() != ("op", closing):
                raise self.fail(f"an unbalanced {text!r}")
            return f"(?:{inner})" + ("?" if text == "[" else "")
        if kind == "string":
            value = _string(text, self.fail)
            if self.peek() == ("op", ".."):
                self.i += 1
                kind2, text2 = self.take()
                high = _string(text2, self.fail) if kind2 == "string" else ""
                if len(value) != 1 or len(high) != 1:
                    raise self.fail('a range needs two one-character strings ("a".."z")')
                return f"[{re.escape(value)}-{re.escape(high)}]"
            return "(?:" + re.escape(value) + ")" if len(value) > 1 else re.escape(value)
        if kind == "regex":
            body, _, flags = text[1:].rpartition("/")
            if flags:
                raise self.fail(f"regex flags ({flags}) in {text} are not supported")
            return f"(?:{body})"
        if kind == "name":
            return self.rule(text)
        raise self.fail(f"unexpected {text!r}" if text else "an expression ends too early")

    def quantified(self, atom: str) -> str:
        token = self.peek()
        if token[0] == "op" and token[1] in "?*+" and token[1]:
            self.i += 1
            return atom + token[1]
        if token == ("op", "~"):
            self.i += 1
            low = self._count()
            high = low
            if self.peek() == ("op", ".."):
                self.i += 1
                high = self._count()
            if high < low:
                raise self.fail(f"a repetition ~{low}..{high}")
            return atom + (f"{{{low}}}" if low == high else f"{{{low},{high}}}")
        return atom

    def _count(self) -> int:
        kind, text = self.take()
        if kind != "number" or int(text) > MAX_REPEAT_COUNT:
            raise self.fail(f"'~' needs a count up to {MAX_REPEAT_COUNT}")
        return int(text)


def _tokenize(text: str, where: str) -> list[tuple[str, str]]:
    tokens = []
    pos = 0
    while pos < len(text):
        found = _TOKEN.match(text, pos)
        if found is None:
            raise LarkError(f"{where}: cannot read {text[pos:pos + 20]!r}")
        pos = found.end()
        if found.lastgroup:
            tokens.append((found.lastgroup, found.group()))
    return tokens


def _string(token: str, fail) -> str:
    if token.endswith("i"):
        raise fail(f"case-insensitive strings ({token}) are not supported")
    body = token[1:-1]
    try:
        return body.encode("latin-1", "backslashreplace").decode("unicode_escape") if "\\" in body else body
    except UnicodeDecodeError:
        raise fail(f"a bad escape in {token}") from None
