"""The JSON grammar a character at a time (parsing/json_prefix.py): every start of a JSON value is
taken, the first character no JSON value could have there is refused, and what was taken is what a
client's partial parser (jiter's, as the Anthropic and OpenAI SDKs read streamed arguments) reads."""

from __future__ import annotations

import json

import jiter
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localserve.parsing.json_prefix import JsonPrefix


def taken(text: str) -> tuple[str, bool]:
    """The longest start of `text` taken, and whether the value was complete there."""
    grammar = JsonPrefix()
    for i, ch in enumerate(text):
        if grammar.complete or not grammar.take(ch):
            return text[:i], grammar.complete
    return text, grammar.complete


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12)
# what a call's arguments are: the reader takes a scalar at the top by other means (it ends only
# where its text does)
JSON_CONTAINERS = st.lists(JSON_VALUES, max_size=4) | st.dictionaries(st.text(max_size=5), JSON_VALUES, max_size=4)


@settings(max_examples=300, deadline=None)
@given(JSON_CONTAINERS, st.sampled_from([None, 0, 2]), st.booleans())
def test_every_start_of_a_json_value_is_taken_and_only_the_whole_is_complete(value, indent, ascii_only):
    text = json.dumps(value, indent=indent, ensure_ascii=ascii_only)
    grammar = JsonPrefix()
    for i, ch in enumerate(text):
        assert not grammar.complete or ch.isspace(), text[:i]
        assert grammar.take(ch), (text[:i], ch)
    assert grammar.complete


@settings(max_examples=500, deadline=None)
@given(JSON_CONTAINERS, st.data())
def test_a_broken_value_is_taken_up_to_a_start_a_partial_parser_reads(value, data):
    text = json.dumps(value)
    at = data.draw(st.integers(1, len(text)))     # (a string at the top is read whole: read_arguments)
    broken = text[:at] + data.draw(st.sampled_from(list(',:{}[]"\\-.e0x tn'))) + text[at:]
    start, complete = taken(broken)
    assert start.startswith(text[:at])      # nothing before the break is refused
    if start:
        jiter.from_json(start.encode(), partial_mode=True)
    if complete:
        json.loads(start)       # (orjson refuses a number past a double's range: the reader checks that)


@pytest.mark.parametrize("text,start", [
    ('{"a":1,,"b":2}', '{"a":1,'),
    ('{"a":1 2}', '{"a":1 '),
    ('{"a":tru}', '{"a":tru'),
    ('{"a":01}', '{"a":0'),
    ('{"a":-}', '{"a":-'),
    ('{"a":1.}', '{"a":1.'),
    ('{"a":1e}', '{"a":1e'),
    ('{"a":.5}', '{"a":'),
    ('{"a":"\\x"}', '{"a":"\\'),
    ('{"a":"\\u12g"}', '{"a":"\\u12'),
    ('{"a":"\\ud800"}', '{"a":"\\ud800'),            # a high surrogate without its low half
    ('{"a":"\\ud800\\u0041"}', '{"a":"\\ud800\\u004'),
    ('{"a":"\\udc00"}', '{"a":"\\udc0'),              # a low half alone
    ('{"a":"\\ud83d\\ude00"}', '{"a":"\\ud83d\\ude00"}'),
    ('{"a" 1}', '{"a" '),
    ('{1:2}', '{'),
    ('{"a":1]', '{"a":1'),
    ('[1,]', '[1,'),
    ('{,}', '{'),
    ('{"a":[}', '{"a":['),
    ('{"a":NaN}', '{"a":'),
    ('{"a":"line\nbreak"}', '{"a":"line\nbreak"}'),  # a raw control character in a string: the reader escapes it
    ('{"a":1}}', '{"a":1}'),                          # complete: the rest is not the value's
])
def test_the_first_character_no_json_value_could_have_is_refused(text, start):
    assert taken(text)[0] == start
