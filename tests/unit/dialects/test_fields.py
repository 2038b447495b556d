"""dialects/fields.py's typed readers: a field absent or null is its default, one of its type is
taken, and any other is a 400 naming the field and what it got."""

from __future__ import annotations

import pytest

from localserve.dialects.fields import read_bool, read_dict, read_str
from localserve.errors import ApiError


@pytest.mark.parametrize("read, good, expected", [
    (read_bool, True, "expected a boolean, got"), (read_str, "x", "expected a string, got"),
    (read_dict, {"a": 1}, "expected an object, got")], ids=["bool", "str", "dict"])
def test_a_field_of_its_type_is_taken_null_is_the_default_and_another_is_a_400(read, good, expected):
    assert read({"f": good}, "f") == good
    assert read({"f": None}, "f") == read({}, "f")
    for wrong in (1, [good], 0.5):
        with pytest.raises(ApiError) as caught:
            read({"f": wrong}, "f")
        assert caught.value.status == 400 and caught.value.param == "f" and expected in caught.value.message


def test_defaults_and_choices():
    assert read_bool({}, "f") is False and read_bool({}, "f", default=True) is True
    assert read_str({}, "f", "d") == "d" and read_dict({}, "f") is None
    assert read_str({"f": "b"}, "f", choices=("a", "b")) == "b"
    with pytest.raises(ApiError, match="must be one of a, b; got 'c'"):
        read_str({"f": "c"}, "f", choices=("a", "b"))
