"""What a client's own GBNF may cost, checked before it reaches llama.cpp.

llama.cpp's grammar sampler keeps one stack per way the text so far can be parsed, and
checks every candidate token against every stack. Ambiguous repetitions multiply the stacks:
1,600 optional items in a row (``[ -~]? [ -~]? ...``) took 23 s for 4 tokens. The text is
scanned (outside literals, classes and comments) for its size, its number of quantifiers,
its repetition counts and how deep its groups nest (llama.cpp's parser recurses into each:
30,000 nested parentheses overflowed the thread's stack); the runtime's per-token time limit
catches what slips through. Left recursion that llama.cpp's own check misses (recursion.py)
is refused too: its set-up grew without bound; so is a long run of items that may each
match nothing (recursion.py measures both).
"""

from __future__ import annotations

import re

from .recursion import left_recursive_rule, longest_optional_run
from .scan import operators

# What a request's grammar, schema or pattern may cost, checked before it is queued (400 naming the limit)
MAX_GRAMMAR_BYTES = 256 * 1024     # GBNF text, given or built from a schema or tools
MAX_GRAMMAR_REPEAT = 2000          # a {m,n} bound (llama.cpp turns larger maxima into unbounded '*')
MAX_GRAMMAR_NESTING = 64           # ( ... ) groups one inside another: llama.cpp's parser recurses into each
MAX_GRAMMAR_QUANTIFIERS = 512      # ?, *, + and {m,n} in a client's own GBNF: many in a row cost cubic time
MAX_GRAMMAR_OPTIONAL_RUN = 32      # items in a row that may each match nothing (a stack each, every token)
MAX_REPEAT_NESTING = 4096          # product of nested {m,n} bounds in a schema pattern, e.g. (a{0,64}){0,64}
MAX_ALL_OF_BRANCHES = 64          # schemas one allOf merges (with a $ref beside other keywords, two)
MAX_PATTERN_CHARS = 64 * 1024     # the patterns of one grammar's schemas together (a few us a character to translate)
MAX_SCHEMA_KEY_LENGTH = 256        # a property name beside additionalProperties (its exclusion nests per character)
MAX_SCHEMA_DEPTH = 64              # nesting of a JSON schema (properties, items, anyOf...)

_COUNTS = re.compile(r"\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")


class GrammarTooCostly(ValueError):
    pass


def check_size(grammar: str) -> None:
    size = len(grammar.encode("utf-8", "surrogatepass"))
    if size > MAX_GRAMMAR_BYTES:
        raise GrammarTooCostly(f"the grammar is {size} bytes long, over the limit of {MAX_GRAMMAR_BYTES} "
                               f"(MAX_GRAMMAR_BYTES)")


def check_client_grammar(grammar: str) -> None:
    """Raise GrammarTooCostly when a GBNF text is over one of the limits."""
    check_size(grammar)
    quantifiers = 0
    depth = 0
    for index, quantifier in operators(grammar):
        if quantifier in "()":
            depth += 1 if quantifier == "(" else -1
            if depth > MAX_GRAMMAR_NESTING:
                raise GrammarTooCostly(f"the grammar nests groups deeper than {MAX_GRAMMAR_NESTING} levels "
                                       f"(MAX_GRAMMAR_NESTING)")
            continue
        quantifiers += 1
        if quantifiers > MAX_GRAMMAR_QUANTIFIERS:
            raise GrammarTooCostly(f"the grammar has more than {MAX_GRAMMAR_QUANTIFIERS} quantifiers (?, *, +, "
                                   f"{{m,n}}), over the limit (MAX_GRAMMAR_QUANTIFIERS)")
        if quantifier == "{":
            counts = _COUNTS.match(grammar, index)
            if counts is None:
                continue        # llama.cpp's parser names the syntax error
            for number in counts.groups():
                if number and int(number) > MAX_GRAMMAR_REPEAT:
                    raise GrammarTooCostly(f"the grammar repeats something {number} times, over the limit of "
                                           f"{MAX_GRAMMAR_REPEAT} (MAX_GRAMMAR_REPEAT)")
    rule = left_recursive_rule(grammar)     # after the nesting check: its reader recurses into groups
    if rule is not None:
        raise GrammarTooCostly(f"the grammar is left-recursive: rule '{rule}' can begin with itself "
                               f"(through parts that may match nothing); llama.cpp would expand it without end")
    try:
        run = longest_optional_run(grammar)
    except RecursionError:      # a chain of thousands of rules, each inside the last
        raise GrammarTooCostly("the grammar chains rules that may match nothing too deeply") from None
    if run > MAX_GRAMMAR_OPTIONAL_RUN:
        raise GrammarTooCostly(f"the grammar has {run} items in a row that may each match nothing, over the limit "
                               f"of {MAX_GRAMMAR_OPTIONAL_RUN} (MAX_GRAMMAR_OPTIONAL_RUN): each token's cost grows "
                               f"with the run")
