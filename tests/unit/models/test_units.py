"""Durations and sizes take ASCII digits only (issue 28, item 7): "９s" is not nine seconds."""

from __future__ import annotations

import pytest

from localserve.models.units import KEEP_ALIVE_NEVER, MAX_DURATION_SECONDS, parse_duration, parse_size


@pytest.mark.parametrize("text", ["９s", "９", "٣m", "1h３0m", "²s", "1e3", "1_000", "nan", "９G"])
def test_other_digits_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize("text", ["９G", "١M", "8\u2003G"])
def test_sizes_take_ascii_digits_and_plain_spaces(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize("value,seconds", [("30s", 30.0), ("1h30m", 5400.0), ("250ms", 0.25), ("9", 9.0),
                                           (" 1.5 ", 1.5), (".5m", 30.0), ("-1", KEEP_ALIVE_NEVER), (0, 0.0)])
def test_durations_as_people_write_them(value, seconds):
    assert parse_duration(value) == seconds


def test_sizes_as_people_write_them():
    assert parse_size("8G") == 8 * 1024 ** 3 and parse_size("512 MiB") == 512 * 1024 ** 2


@pytest.mark.parametrize("value", [1e18, 1e308, "99999999999h", "2562048h", MAX_DURATION_SECONDS * 1.0001,
                                   "9" * 400])
def test_nothing_longer_than_ollamas_longest_duration(value):
    """Go's time.Duration (int64 nanoseconds) is Ollama's: past it there is no deadline to show."""
    with pytest.raises(ValueError, match="MAX_DURATION_SECONDS"):
        parse_duration(value)


@pytest.mark.parametrize("value, seconds", [("2562047h", 2562047 * 3600.0), (MAX_DURATION_SECONDS, MAX_DURATION_SECONDS),
                                            (-1e308, KEEP_ALIVE_NEVER), ("-99999999999h", KEEP_ALIVE_NEVER)])
def test_the_longest_duration_and_any_negative_one_are_taken(value, seconds):
    assert parse_duration(value) == seconds
