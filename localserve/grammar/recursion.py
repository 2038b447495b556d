"""A client's GBNF read into rules: left recursion llama.cpp's own check misses, and runs of
items that may match nothing.

llama.cpp refuses a rule that can begin with itself, but it counts a rule as able to match
nothing only when one of its alternatives is literally empty. Through a group whose
alternative is itself optional (``r ::= "x" | (("{"* | "a") r) r``) the recursion goes
unseen, and expanding the rule's first positions pushes one more continuation per turn:
grammar set-up grew the process past 3 GB and then threw std::bad_alloc, which aborts it.
Here the text is read into rules (groups become rules of their own), which rules can match
nothing is found by a fixpoint, and a cycle among the rules each can begin with is refused.
A text this reader does not understand is left to llama.cpp's parser, which names the error.

Items that may each match nothing, one after another (``[ -~]? [ -~]? ...``), let the text so
far be parsed in as many ways as there are items: llama.cpp keeps a stack for each and checks
every candidate token against every stack, so a token's cost grows with the run (400 of them
took 0.3 to 19 s a token on a 500-token vocabulary). ``longest_optional_run`` measures it.
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"""
    (?P<space>\s+|\#[^\n]*)
  | (?P<define>::=)
  | (?P<literal>"(?:\\.|[^"\\])*")
  | (?P<terminal>\[(?:\\.|[^\]\\])*\]|!?<[^>]*>|\.)
  | (?P<name>[A-Za-z0-9_-]+)
  | (?P<quantifier>[?*+]|\{\s*\d*\s*(?:,\s*\d*\s*)?\})
  | (?P<punct>[|()])
""", re.VERBOSE)


def left_recursive_rule(grammar: str) -> str | None:
    """The name of a rule that can begin with itself, or None (also when the text is not understood)."""
    rules = _read(grammar)
    if rules is None:
        return None
    nullable = _nullable(rules)
    starts = {name: set() for name in rules}
    for name, alternatives in rules.items():
        for items in alternatives:
            for kind, value, optional in items:
                if kind == "ref":
                    starts[name].add(value)
                if not (optional or kind == "ref" and nullable.get(value) or kind == "empty"):
                    break
    return _on_a_cycle(starts)


def longest_optional_run(grammar: str) -> int:
    """The most items in a row that may each match nothing, a nullable rule counting as the
    longest run inside it (0 when the text is not understood)."""
    rules = _read(grammar)
    if rules is None:
        return 0
    nullable = _nullable(rules)
    widths: dict[str, int] = {}

    def width(name: str) -> int:
        if name not in widths:
            widths[name] = 1                    # a rule met again inside itself counts once
            widths[name] = max((run(items) for items in rules[name]), default=1)
        return widths[name]

    def run(items: list[list]) -> int:
        longest = current = 0
        for kind, value, optional in items:
            skippable = optional or kind == "empty" or kind == "ref" and nullable.get(value, False)
            if not skippable:
                current = 0
                continue
            current += max(1, width(value)) if kind == "ref" and value in rules else 1
            longest = max(longest, current)
        return longest

    return max((width(name) for name in rules), default=0)


def _tokens(grammar: str):
    i, n = 0, len(grammar)
    while i < n:
        match = _TOKEN.match(grammar, i)
        if match is None:
            raise ValueError(i)
        i = match.end()
        if match.lastgroup != "space":
            yield match.lastgroup, match.group()


def _read(grammar: str) -> dict[str, list[list[list]]] | None:
    """Rules as name -> alternatives -> items [kind ("ref", "term", "empty"), value, optional]."""
    try:
        tokens = list(_tokens(grammar))
    except ValueError:
        return None
    rules: dict[str, list[list[list]]] = {}
    groups = [0]

    def alternatives(i: int, nested: bool):
        alts: list[list[list]] = [[]]
        while i < len(tokens):
            kind, text = tokens[i]
            if not nested and kind == "name" and i + 1 < len(tokens) and tokens[i + 1][0] == "define":
                return alts, i
            if text == ")":
                return (alts, i + 1) if nested else (None, i)
            if text == "|":
                alts.append([])
            elif text == "(":
                inner, i = alternatives(i + 1, True)
                if inner is None:
                    return None, i
                groups[0] += 1
                group = f"({groups[0]})"
                rules[group] = inner
                alts[-1].append(["ref", group, False])
                continue
            elif kind == "quantifier":
                if not alts[-1]:
                    return None, i
                if text in "?*" or re.match(r"\{\s*(0\s*[,}]|,)", text):
                    alts[-1][-1][2] = True
            elif kind == "name":
                alts[-1].append(["ref", text, False])
            elif kind == "literal":
                alts[-1].append(["empty" if text == '""' else "term", text, False])
            elif kind == "terminal":
                alts[-1].append(["term", text, False])
            else:
                return None, i
            i += 1
        return (None, i) if nested else (alts, i)

    i = 0
    while i < len(tokens):
        if tokens[i][0] != "name" or i + 1 >= len(tokens) or tokens[i + 1][0] != "define":
            return None
        name = tokens[i][1]
        alts, i = alternatives(i + 2, False)
        if alts is None:
            return None
        rules.setdefault(name, []).extend(alts)
    return rules


def _nullable(rules: dict[str, list[list[list]]]) -> dict[str, bool]:
    nullable = dict.fromkeys(rules, False)
    changed = True
    while changed:
        changed = False
        for name, alternatives in rules.items():
            if nullable[name]:
                continue
            if any(all(optional or kind == "empty" or kind == "ref" and nullable.get(value, False)
                       for kind, value, optional in items) for items in alternatives):
                nullable[name] = changed = True
    return nullable


def _on_a_cycle(edges: dict[str, set[str]]) -> str | None:
    """A named rule on a cycle of edges (a group's own name if no named one is)."""
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    for root in edges:
        if root in state:
            continue
        path, stack = [root], [iter(edges[root])]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif nxt not in edges or state.get(nxt) == 2:
                continue
            elif state.get(nxt) == 1:
                cycle = path[path.index(nxt):]
                return next((n for n in cycle if not n.startswith("(")), cycle[0])
            else:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(edges[nxt]))
    return None
