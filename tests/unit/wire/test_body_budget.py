"""The in-flight body budget charges what arrived, never what a head announced (issue 28, item 2)."""

from __future__ import annotations

from localserve.wire.budget import ByteBudget, Held
from localserve.wire.http import Limits, RequestReader

LIMITS = Limits(max_body_bytes=32 * 1024 * 1024)


def reader_after(head: bytes, body_part: bytes) -> RequestReader:
    reader = RequestReader(LIMITS)
    reader.feed(head + body_part)
    assert reader.next_request() is None
    return reader


def test_a_content_length_body_counts_the_bytes_that_arrived():
    reader = reader_after(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n", b"x")
    assert reader.body_received == 1
    reader.feed(b"y" * 999)
    assert reader.next_request() is None and reader.body_received == 1000


def test_a_chunk_announcing_a_huge_size_counts_only_its_bytes_so_far():
    reader = reader_after(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                          b"1FFFFFF\r\nabc")
    assert reader.body_received == 3


def test_nothing_is_counted_before_the_head():
    reader = RequestReader(LIMITS)
    reader.feed(b"POST / HTTP/1.1\r\nContent-Len")
    assert reader.next_request() is None and reader.body_received == 0


def test_four_dripping_bodies_leave_the_budget_to_everyone_else():
    budget = ByteBudget(4 * LIMITS.max_body_bytes)
    drippers = [Held(budget, LIMITS.max_body_bytes) for _ in range(4)]
    for held in drippers:
        reader = reader_after(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 33554432\r\n\r\n", b"{")
        assert held.grow_to(reader.body_received)
    bystander = Held(budget, LIMITS.max_body_bytes)
    assert bystander.grow_to(1024 * 1024) and budget.used == 4 + 1024 * 1024


def test_one_connection_holds_at_most_its_share():
    budget = ByteBudget(1000)
    held = Held(budget, 300)
    assert held.grow_to(300) and not held.grow_to(301)
    assert budget.used == 300 and held.release() == 300 and budget.used == 0
