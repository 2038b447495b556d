"""hf_json writes what json.dumps writes, for every value a chat template can hand it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localserve.prompt import hf_json

scalars = (st.none() | st.booleans() | st.integers(min_value=-2**80, max_value=2**80)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text())
keys = st.text() | st.integers(min_value=-2**70, max_value=2**70) | st.booleans() | st.none()
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                      | st.dictionaries(st.text(), inner, max_size=4), max_leaves=20)
options = st.fixed_dictionaries({
    "ensure_ascii": st.booleans(),
    "indent": st.sampled_from([None, 0, 2, 4, "\t"]),
    "separators": st.sampled_from([None, (",", ":"), (", ", ": ")]),
})


@settings(max_examples=400)
@given(values, options)
def test_matches_json_dumps(value, kwargs):
    assert hf_json.dumps(value, **kwargs) == json.dumps(value, **kwargs)


@settings(max_examples=100)
@given(st.dictionaries(st.text(), scalars, max_size=6), st.booleans())
def test_sort_keys_matches(value, ensure_ascii):
    assert hf_json.dumps(value, sort_keys=True, ensure_ascii=ensure_ascii) == \
        json.dumps(value, sort_keys=True, ensure_ascii=ensure_ascii)


@given(st.dictionaries(keys, scalars, max_size=6))
def test_non_string_keys_are_written_as_json_does(value):
    assert hf_json.dumps(value) == json.dumps(value, ensure_ascii=False)   # HF's default


def test_characters_outside_the_basic_plane_and_controls():
    text = "a\x00\x1f\x7f\u2028é😀\\\"/"
    for ensure_ascii in (False, True):
        assert hf_json.dumps(text, ensure_ascii=ensure_ascii) == json.dumps(text, ensure_ascii=ensure_ascii)


def test_a_lone_surrogate_is_escaped():
    assert hf_json.dumps("a\ud800b\\u") == '"a\\ud800b\\\\u"'
    assert hf_json.dumps("\udc00", ensure_ascii=True) == json.dumps("\udc00")


def test_what_json_refuses_is_refused():
    with pytest.raises(TypeError):
        hf_json.dumps({"a": object()})
    with pytest.raises(TypeError):
        hf_json.dumps({(1, 2): 1})
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular"):
        hf_json.dumps(loop)
