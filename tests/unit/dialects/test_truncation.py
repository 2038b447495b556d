"""Responses `truncation: "auto"` finds its cut with a few builds, not one per dropped item, and
stops when the client has left (issue 28, item 3). The build is the caller's: here a stand-in
that measures items, so the search itself is what is tested."""

from __future__ import annotations

import math

import pytest

from localserve.dialects.responses.items import cut_points
from localserve.dialects.responses.request import build_newest_that_fit
from localserve.errors import ClientGone
from localserve.generation import ContextOverflow


def message(size: int) -> dict:
    return {"type": "message", "role": "user", "size": size}


class Builds:
    """A prompt as long as the sizes of the items kept; a context of `n_ctx`."""

    def __init__(self, n_ctx: int):
        self.n_ctx = n_ctx
        self.calls = 0

    def __call__(self, kept: list[dict]) -> list[dict]:
        self.calls += 1
        used = sum(item.get("size", 1) for item in kept)
        if used >= self.n_ctx:
            raise ContextOverflow(used, self.n_ctx)
        return kept


def newest_that_fit_one_at_a_time(items: list[dict], n_ctx: int) -> list[dict]:
    """What dropping the oldest item until it fits keeps (the whole did not fit): the answer to match."""
    for cut in cut_points(items):
        if sum(item.get("size", 1) for item in items[cut:]) < n_ctx:
            return items[cut:]
    raise AssertionError("nothing fits")


@pytest.mark.parametrize("count,n_ctx", [(2, 3), (10, 35), (2000, 1000), (2000, 17_990), (4096, 50)])
def test_the_longest_tail_that_fits_with_log_builds(count, n_ctx):
    items = [message(1 + i % 17) for i in range(count)]
    builds = Builds(n_ctx)
    kept = build_newest_that_fit(items, builds, lambda: None)
    assert kept == newest_that_fit_one_at_a_time(items, n_ctx)
    assert builds.calls <= math.ceil(math.log2(count)) + 1


def test_a_cut_leaves_no_orphaned_output_or_reasoning_first():
    items = [message(5), {"type": "function_call", "size": 5}, {"type": "function_call_output", "size": 5},
             {"type": "reasoning", "size": 5}, message(5), message(5)]
    assert cut_points(items) == [1, 4, 5]
    kept = build_newest_that_fit(items, Builds(14), lambda: None)
    assert kept == items[4:] and kept[0]["type"] == "message"


def test_a_trailing_compaction_trigger_is_never_all_that_is_kept():
    trigger = {"type": "compaction_trigger", "size": 0}
    items = [message(5), message(5), trigger]
    assert cut_points(items) == [1]
    kept = build_newest_that_fit(items, Builds(8), lambda: None)
    assert kept == [items[1], trigger]
    with pytest.raises(ContextOverflow):       # the last turn does not fit: an error, not an empty conversation
        build_newest_that_fit(items, Builds(4), lambda: None)


def test_when_not_even_the_last_item_fits_its_error_is_raised():
    with pytest.raises(ContextOverflow) as info:
        build_newest_that_fit([message(5), message(50)], Builds(10), lambda: None)
    assert (info.value.n_prompt_tokens, info.value.n_ctx) == (50, 10)


def test_a_departed_client_stops_the_search():
    items = [message(3) for _ in range(2000)]
    builds = Builds(100)
    checks = []

    def check_client():
        checks.append(1)
        if len(checks) > 2:
            raise ClientGone()

    with pytest.raises(ClientGone):
        build_newest_that_fit(items, builds, check_client)
    assert builds.calls == 2
