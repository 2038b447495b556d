"""The converters that read a flag's value (cli/option_values.py): what each takes and refuses,
and what the config file reader expects of each (flags.py reads it from the converter)."""

from __future__ import annotations

import argparse

import pytest

from localserve.cli import option_values as values
from localserve.cli.flags import _value_kind


@pytest.mark.parametrize("convert, text, expected", [
    (values.log_level, " DEBUG ", "debug"),
    (values.speculative_mode, "Ngram", "ngram"),
    (values.pooling_mode, "cls", "cls"),
    (values.non_negative_int, "0", 0),
    (values.positive_int, "1", 1),
    (values.non_negative_float, "0", 0.0),
    (values.positive_seconds, "0.5", 0.5),
    (values.duration, "1m30s", 90.0),
    (values.size, "1K", 1024),
])
def test_each_converter_takes_its_values(convert, text, expected):
    assert convert(text) == expected


@pytest.mark.parametrize("convert, text, refusal", [
    (values.log_level, "trace", "must be one of debug, info, warning, error"),
    (values.speculative_mode, "eagle", "must be one of off, ngram, draft"),
    (values.pooling_mode, "max", "must be one of mean, last, cls"),
    (values.non_negative_int, "-1", "must not be negative"),
    (values.positive_int, "0", "must be at least 1"),
    (values.non_negative_float, "-0.5", "must not be negative"),
    (values.non_negative_float, "nan", "must not be negative"),
    (values.positive_seconds, "0", "must be a positive number of seconds"),
    (values.positive_seconds, "inf", "must be a positive number of seconds"),
    (values.positive_seconds, "nan", "must be a positive number of seconds"),
    (values.duration, "5x", "is not a duration"),
    (values.size, "lots", "size"),
])
def test_each_converter_names_what_it_expected(convert, text, refusal):
    with pytest.raises(argparse.ArgumentTypeError, match=refusal):
        convert(text)


def test_text_that_is_no_number_is_argparses_invalid_value_under_the_converters_name():
    with pytest.raises(ValueError):
        values.positive_int("x")
    assert values.positive_int.__name__ == "positive_int"     # argparse: "invalid positive_int value: 'x'"


def test_the_config_file_reader_knows_what_each_converter_returns():
    assert _value_kind(values.positive_int) == _value_kind(values.non_negative_int) == "int"
    assert _value_kind(values.positive_seconds) == _value_kind(values.non_negative_float) == "float"
    assert _value_kind(values.pooling_mode) == _value_kind(values.discovery_sources) == "str"
    assert values.LOOSE == (values.duration, values.size)
