"""Ollama's times: /api/ps shows any stored keep-alive deadline, however far (issue 44, item 7)."""

from __future__ import annotations

import time

import pytest

from localserve.dialects.ollama.clock import FOREVER, expires_at
from localserve.models.units import MAX_DURATION_SECONDS


@pytest.mark.parametrize("ahead", [1e18, 1e308, float("inf")])
def test_a_deadline_past_what_a_date_can_say_is_forever(ahead):
    assert expires_at(time.monotonic() + ahead) == FOREVER


def test_not_even_a_nan_deadline_fails():
    assert isinstance(expires_at(float("nan")), str)


def test_the_longest_keep_alive_has_its_date_and_a_past_deadline_is_now():
    assert expires_at(time.monotonic() + MAX_DURATION_SECONDS).startswith("23")
    years = {time.strftime("%Y", time.gmtime())}
    past = expires_at(time.monotonic() - 1e18)
    years.add(time.strftime("%Y", time.gmtime()))       # a new year may have begun meanwhile
    assert past[:4] in years
    assert expires_at(None) == FOREVER
