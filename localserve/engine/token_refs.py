"""Finding the tokens a GBNF grammar names whole (``<think>``, ``<[7]>``), as llama.cpp's parser reads them."""

from __future__ import annotations


def token_refs(grammar: str) -> list[tuple[str, bool]]:
    """Token references (``<name>``, ``<[id]>``) outside strings and classes, and whether each
    is negated (``!<name>``: llama.cpp reads a ``!`` there as nothing else)."""
    refs, i, n, negated = [], 0, len(grammar), False
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
        elif c == "<":
            end = grammar.find(">", i)
            if end == -1:
                break
            refs.append((grammar[i + 1:end], negated))
            negated = False
            i = end + 1
        else:
            negated = False
            i += 1
    return refs
