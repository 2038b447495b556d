"""What a schema costs to turn into a grammar is bounded by the grammar's own limits, counted as
the work is done, never by a walk that runs to the end first (hostile2).

Each case was a connection thread holding the GIL for seconds to minutes on a small body: a
50,000-property schema (400 KB) walked whole before its 1.2 MB grammar was refused (a free
rule name was found by counting up from 1, quadratic in the rules); `required` looked up as a
list for every property; 100,000 dots in a pattern (100 KB) took 14 s, each one translated
anew; an allOf of 5,000 one-property objects took 5 s (keys times branches); prefixItems nested
a group per item, which llama.cpp's parser refused past about a thousand ("the grammar could
not be parsed").
"""

from __future__ import annotations

import pytest

from localserve.grammar import regex
from localserve.grammar.gbnf import SchemaError
from localserve.grammar.grammar import json_schema_grammar
from localserve.grammar.limits import (MAX_ALL_OF_BRANCHES, MAX_GRAMMAR_BYTES, MAX_GRAMMAR_NESTING,
                                       MAX_PATTERN_CHARS)
from localserve.grammar.scan import operators
from localserve.grammar.schema import GrammarBuilder


class CountingDict(dict):
    lookups = 0

    def __contains__(self, key):
        CountingDict.lookups += 1
        return super().__contains__(key)


def test_a_free_rule_name_is_found_without_counting_up_from_one():
    builder = GrammarBuilder()
    builder._rules = CountingDict()
    CountingDict.lookups = 0
    names = [builder.add_rule("item", f'"{i}"') for i in range(2000)]
    assert len(set(names)) == 2000 and names[:3] == ["item", "item-2", "item-3"]
    assert CountingDict.lookups < 3 * 2000       # counting up from 1 each time: about 2 million


def test_a_grammar_past_the_limit_is_refused_while_it_is_built():
    """The last property is bad: reaching it would mean the whole schema was walked first."""
    properties = {f"p{i}": {"type": "string"} for i in range(50_000)}
    properties["last"] = {"type": "bogus"}
    with pytest.raises(SchemaError, match="MAX_GRAMMAR_BYTES"):
        json_schema_grammar({"type": "object", "properties": properties})


def test_a_grammar_just_under_the_limit_is_built():
    grammar = json_schema_grammar({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(1500)}})
    assert 200_000 < len(grammar) < MAX_GRAMMAR_BYTES


class CountingList(list):
    lookups = 0

    def __contains__(self, item):
        CountingList.lookups += 1
        return super().__contains__(item)


def test_required_names_are_looked_up_in_a_set():
    names = [f"p{i}" for i in range(300)]
    CountingList.lookups = 0
    json_schema_grammar({"type": "object", "properties": {n: {"type": "null"} for n in names},
                         "required": CountingList(names)})
    assert CountingList.lookups == 0


def test_a_repeated_character_set_in_a_pattern_is_translated_once(monkeypatch):
    calls = []
    translate = regex._Regex._encode
    monkeypatch.setattr(regex._Regex, "_encode", lambda self, *a: calls.append(a) or translate(self, *a))
    grammar = json_schema_grammar({"type": "string", "pattern": "^" + "." * 500 + "a" * 500 + "[bc]" * 500 + "$"})
    assert len(calls) == 3
    assert grammar.count('"a"') + grammar.count("[a]") == 500


def test_patterns_past_their_limit_together_are_refused_naming_it():
    half = "^" + "a" * (MAX_PATTERN_CHARS // 2) + "$"
    two = {"type": "object", "properties": {"a": {"type": "string", "pattern": half},
                                            "b": {"type": "string", "pattern": half + "b"}}}
    with pytest.raises(SchemaError, match="MAX_PATTERN_CHARS"):
        json_schema_grammar(two)
    del two["properties"]["b"]
    json_schema_grammar(two)


def test_a_bad_pattern_is_quoted_cut_in_the_error():
    with pytest.raises(SchemaError) as raised:
        json_schema_grammar({"type": "string", "pattern": "^(" + "a" * 20_000 + "$"})
    assert "(20003 characters)" in str(raised.value) and len(str(raised.value)) < 1000


def test_an_allof_past_its_branch_limit_is_refused_and_the_limit_itself_merges():
    branches = [{"type": "object", "properties": {f"p{i}": {"type": "null"}}} for i in range(MAX_ALL_OF_BRANCHES)]
    json_schema_grammar({"allOf": branches})
    with pytest.raises(SchemaError, match="MAX_ALL_OF_BRANCHES"):
        json_schema_grammar({"allOf": [*branches, {"type": "object", "properties": {"x": {"type": "null"}}}]})


@pytest.mark.parametrize("least", [0, 1, 700, 2000])
def test_prefix_items_nest_no_group_per_item(least):
    """Each item after minItems may end the array: a rule each, where a group inside a group
    went past llama.cpp's parser's nesting."""
    grammar = json_schema_grammar({"type": "array", "prefixItems": [{"type": "integer"}] * 1500, "minItems": least})
    depth = deepest = 0
    for _, op in operators(grammar):
        depth += {"(": 1, ")": -1}.get(op, 0)
        deepest = max(deepest, depth)
    assert deepest < MAX_GRAMMAR_NESTING


@pytest.mark.parametrize("least, written", [(0, 1), (1, 1), (2, 2), (3, 3), (5, 3)])
def test_prefix_items_keep_their_order_and_minimum(least, written):
    """The first `least` items are written in the root's rule; each later one in a rule of its own,
    each optional; minItems 0 leaves the whole list optional."""
    grammar = json_schema_grammar({"type": "array", "prefixItems": [{"type": "null"}, {"type": "string"},
                                                                    {"type": "boolean"}], "minItems": least})
    root = next(line for line in grammar.splitlines() if line.startswith("schema ::="))
    assert root.startswith('schema ::= "[" ws ' + ("( null" if least == 0 else "null"))
    assert root.count(' ws "," ws ') == written - 1
    assert root.endswith('ws )? "]"') is (least == 0)
    tails = [line for line in grammar.splitlines() if line.startswith("schema-tail")]
    assert len(tails) == 3 - written and all(line.endswith(")?") for line in tails)
