"""The converters that read a flag's value (cli/option_values.py): what each takes and refuses,
and what the config file reader expects of each (flags.py reads it from the converter)."""

from __future__ import annotations

import argparse

import pytest

from localserve.cli import option_values as values
from localserve.cli.flags import _value_kind


CONVERTERS = [  # each converter: a value it takes, what that becomes; values it refuses, what it says
    (values.log_level, " DEBUG ", "debug", ("trace",), "must be one of debug, info, warning, error"),
    (values.speculative_mode, "Ngram", "ngram", ("eagle",), "must be one of off, ngram, draft"),
    (values.pooling_mode, "cls", "cls", ("max",), "must be one of mean, last, cls"),
    (values.non_negative_int, "0", 0, ("-1",), "must not be negative"),
    (values.positive_int, "1", 1, ("0",), "must be at least 1"),
    (values.non_negative_float, "0", 0.0, ("-0.5", "nan"), "must not be negative"),
    (values.positive_seconds, "0.5", 0.5, ("0", "inf", "nan"), "must be a positive number of seconds"),
    (values.duration, "1m30s", 90.0, ("5x",), "is not a duration"),
    (values.size, "1K", 1024, ("lots",), "size"),
]


@pytest.mark.parametrize("convert, text, expected, refused, refusal", CONVERTERS,
                         ids=[row[0].__name__ for row in CONVERTERS])
def test_each_converter_takes_its_values_and_names_what_it_expected(convert, text, expected, refused, refusal):
    assert convert(text) == expected
    for bad in refused:
        with pytest.raises(argparse.ArgumentTypeError, match=refusal):
            convert(bad)


def test_text_that_is_no_number_is_argparses_invalid_value_under_the_converters_name():
    with pytest.raises(ValueError):
        values.positive_int("x")
    assert values.positive_int.__name__ == "positive_int"     # argparse: "invalid positive_int value: 'x'"


def test_the_config_file_reader_knows_what_each_converter_returns():
    assert _value_kind(values.positive_int) == _value_kind(values.non_negative_int) == "int"
    assert _value_kind(values.positive_seconds) == _value_kind(values.non_negative_float) == "float"
    assert _value_kind(values.pooling_mode) == _value_kind(values.discovery_sources) == "str"
    assert values.LOOSE == (values.duration, values.size)
