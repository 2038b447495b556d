"""Closing a JSON object cut off part way, as Anthropic's SDK reads a streamed tool input."""

from __future__ import annotations

import json
import string

import jiter       # the Anthropic SDK's partial JSON reader (the test extra's anthropic needs it)
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localserve.parsing.partial_json import close_object

CASES = [
    ('{"city":"Paris","days":3}', {"city": "Paris", "days": 3}),
    ('{"city":"Paris","days":3', {"city": "Paris", "days": 3}),
    ('{"city":"Paris",', {"city": "Paris"}),
    ('{"city":"Par', {}),                       # a string cut off is left out
    ('{"city":', {}),                           # so is a key without its value
    ('{"ci', {}),
    ('{', {}),
    ("", {}),
    ("   ", {}),
    ('{"a":12', {"a": 12}),
    ('{"a":1.', {}),                            # a number that cannot end there
    ('{"a":-', {}),
    ('{"a":1e', {}),
    ('{"a":tru', {}),                           # a literal cut off
    ('{"a":true', {"a": True}),
    ('{"a":[1,2', {"a": [1, 2]}),
    ('{"a":[1,', {"a": [1]}),
    ('{"a":[', {"a": []}),
    ('{"a":{"b":"x"', {"a": {"b": "x"}}),
    ('{"a":{"b":', {"a": {}}),
    ('{"a":"x\\"', {}),                         # the quote is escaped: still inside the string
    ('{"a":"x\\\\"', {"a": "x\\"}),             # the backslash is: the string ended
    ('{"a":"}"', {"a": "}"}),
    ('{ "a" : [ 1 , { "b" : null } ] , "c"', {"a": [1, {"b": None}]}),
    ('{"a":1,,}', {"a": 1}),                    # no JSON from the second comma on: what came before
    ('{"a":1]', {"a": 1}),
    ('{"a":01', {}),
    ('[1,2', {}),                               # no object
    ('"text', {}),
    ("12", {}),
    ('{"a":"\\q"', {}),                         # a bad escape: orjson refuses the string
]


@pytest.mark.parametrize("text,expected", CASES)
def test_a_cut_object_keeps_its_whole_members(text, expected):
    assert close_object(text) == expected


def _jiter(text: str):
    try:
        value = jiter.from_json(text.encode(), partial_mode=True)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


@pytest.mark.parametrize("text,expected", [c for c in CASES if c[0].strip() and c[0][0] == "{"
                                           and c[0] not in ('{"a":1,,}', '{"a":1]', '{"a":01', '{"a":"\\q"')])
def test_the_examples_read_as_the_anthropic_sdk_reads_them(text, expected):
    assert _jiter(text) == expected


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False, width=32),
                    st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=6))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(string.ascii_letters, max_size=3), inner, max_size=3), max_leaves=8)
objects = st.dictionaries(st.text(string.ascii_letters + '"\\ ', max_size=4), values, max_size=4)


@settings(max_examples=300, deadline=None)
@given(value=objects, indent=st.sampled_from([None, 1]), ascii_only=st.booleans(), data=st.data())
def test_every_prefix_closes_as_the_anthropic_sdk_reads_it(value, indent, ascii_only, data):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    cut = data.draw(st.integers(0, len(text)))
    assert close_object(text[:cut]) == _jiter(text[:cut])
    assert close_object(text) == value
