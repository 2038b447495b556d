"""Reading a GBNF text the way llama.cpp's parser does, outside literals, character classes and
comments: the operators (?, *, +, {, ( and )) and the tokens named whole (``<think>``,
``<[7]>``, negated ``!<name>``). The cost limits (limits.py) and the engine's check of named
tokens both read a client's grammar through this one scanner.
"""

from __future__ import annotations

from collections.abc import Iterator

OPERATORS = "?*+{()"


def scan(grammar: str) -> Iterator[tuple[int, str, bool]]:
    """(index, text, negated) for each operator (text: its character) and each token reference
    (text: ``<name>`` with its brackets; negated when ``!`` stands just before it)."""
    i, n, negated = 0, len(grammar), False
    while i < n:
        c = grammar[i]
        if c == "#":
            end = grammar.find("\n", i)
            i = n if end == -1 else end
        elif c in "\"[":
            close = '"' if c == '"' else "]"
            i += 1
            while i < n and grammar[i] != close:
                i += 2 if grammar[i] == "\\" else 1
            i += 1
        elif c == "!":
            negated = True
            i += 1
            continue
        elif c == "<":
            end = grammar.find(">", i)
            if end == -1:
                return          # llama.cpp's parser names the syntax error
            yield i, grammar[i:end + 1], negated
            i = end + 1
        else:
            if c in OPERATORS:
                yield i, c, False
            i += 1
        negated = False


def token_refs(grammar: str) -> list[tuple[str, bool]]:
    """The tokens a grammar names whole (``think`` for ``<think>``) and whether each is negated."""
    return [(text[1:-1], negated) for _, text, negated in scan(grammar) if text.startswith("<")]


def operators(grammar: str) -> Iterator[tuple[int, str]]:
    """(index, character) of each operator."""
    return ((i, text) for i, text, _ in scan(grammar) if text in OPERATORS)
