"""localserve.store.threads on real SQLite files: a thread started, claimed, advanced, released;
continued only from its latest reply and once at a time; each key's own; bounded by count, bytes
and age; claims a dead process left released at the next start."""

import pytest

from localserve.store.store import Store
from localserve.store.threads import (ALREADY_CONTINUED, IN_FLIGHT, NOT_FOUND, ThreadLimits, ThreadMiss,
                                      ThreadRecords)


class Clock:
    def __init__(self):
        self.now = 1_000_000.0

    def __call__(self):
        return self.now


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "data" / "localserve.db")


@pytest.fixture
def store(db_path):
    s = Store(db_path)
    yield s
    s.close()


@pytest.fixture
def clock():
    return Clock()


def records(store, clock, scope="", **limits):
    return ThreadRecords(store.scoped(scope), ThreadLimits(**limits), clock)


def state(*texts, system="be brief"):
    return {"system": system, "messages": [{"role": "user", "content": text} for text in texts]}


def missed(threads, message_id):
    with pytest.raises(ThreadMiss) as raised:
        threads.claim(message_id)
    return raised.value.reason


def test_a_thread_goes_on_from_its_latest_reply_and_holds_its_whole_state(store, clock):
    threads = records(store, clock)
    assert threads.start("thread_a", "msg_1", state("one"))
    held = threads.claim("msg_1")
    assert held.id == "thread_a" and held.previous_message_id == "msg_1" and held.state == state("one")
    assert threads.advance(held, "msg_2", state("one", "two"))
    assert threads.claim("msg_2").state == state("one", "two")


def test_a_reply_already_continued_is_told_apart_from_one_never_seen(store, clock):
    threads = records(store, clock)
    threads.start("thread_a", "msg_1", state("one"))
    threads.advance(threads.claim("msg_1"), "msg_2", state("one", "two"))
    assert missed(threads, "msg_1") == ALREADY_CONTINUED
    assert missed(threads, "msg_nope") == NOT_FOUND


def test_a_claimed_thread_refuses_a_second_continue_until_released(store, clock):
    threads = records(store, clock)
    threads.start("thread_a", "msg_1", state("one"))
    held = threads.claim("msg_1")
    assert missed(threads, "msg_1") == IN_FLIGHT
    threads.release(held)
    again = threads.claim("msg_1")           # the failed turn may come again
    assert again.state == state("one")


def test_an_advance_from_a_reply_no_longer_latest_keeps_nothing(store, clock):
    threads = records(store, clock)
    threads.start("thread_a", "msg_1", state("one"))
    held = threads.claim("msg_1")
    assert threads.advance(held, "msg_2", state("one", "two"))
    assert not threads.advance(held, "msg_3", state("one", "three"))
    assert threads.claim("msg_2").state == state("one", "two")
    assert missed(threads, "msg_3") == NOT_FOUND


def test_another_key_never_finds_a_thread_it_did_not_make(store, clock):
    mine, theirs = records(store, clock, "alice"), records(store, clock, "bob")
    mine.start("thread_a", "msg_1", state("secret"))
    assert missed(theirs, "msg_1") == NOT_FOUND
    # nor can it release or advance mine through a claim it forged
    held = mine.claim("msg_1")
    theirs.release(held)
    assert missed(mine, "msg_1") == IN_FLIGHT
    assert not theirs.advance(held, "msg_2", state("theirs"))
    assert mine.advance(held, "msg_2", state("secret", "more"))


def test_a_thread_unused_past_its_age_is_gone(store, clock):
    threads = records(store, clock, max_age=60)
    threads.start("thread_a", "msg_1", state("one"))
    clock.now += 59
    threads.release(threads.claim("msg_1"))
    clock.now += 61
    assert missed(threads, "msg_1") == NOT_FOUND
    threads.start("thread_b", "msg_b", state("new"))          # a write prunes it for good
    assert store._all("SELECT id FROM threads", ()) == [("thread_b",)]
    assert store._all("SELECT message_id FROM thread_messages", ()) == [("msg_b",)]


def test_past_its_count_a_key_loses_its_least_recently_used_threads(store, clock):
    threads = records(store, clock, count=2)
    other = records(store, clock, "bob", count=2)
    other.start("thread_bob", "msg_bob", state("bob's"))
    for n in range(3):
        clock.now += 1
        threads.start(f"thread_{n}", f"msg_{n}", state(str(n)))
        if n == 1:                       # thread_0 used last: thread_1 is the oldest now
            clock.now += 1
            threads.advance(threads.claim("msg_0"), "msg_0b", state("0", "again"))
    assert missed(threads, "msg_1") == NOT_FOUND
    assert threads.claim("msg_0b") and threads.claim("msg_2")
    assert other.claim("msg_bob")        # another key's count is its own


def test_past_its_bytes_a_key_loses_its_oldest_threads_and_one_too_large_is_not_held(store, clock):
    size = len('{"system":"be brief","messages":[{"role":"user","content":"xxxxxxxxxx"}]}')
    threads = records(store, clock, bytes=2 * size)
    for n in range(3):
        clock.now += 1
        assert threads.start(f"thread_{n}", f"msg_{n}", state(str(n) * 10))
    assert missed(threads, "msg_0") == NOT_FOUND
    threads.claim("msg_1")
    clock.now += 1
    assert not threads.start("thread_big", "msg_big", state("x" * (2 * size)))
    assert missed(threads, "msg_big") == NOT_FOUND
    assert missed(threads, "msg_1") == IN_FLIGHT        # a claimed thread is spared
    held = threads.claim("msg_2")
    assert not threads.advance(held, "msg_3", state("y" * (2 * size)))     # grown past the bytes: let go
    assert missed(threads, "msg_2") == NOT_FOUND


def test_a_claim_left_by_a_dead_process_is_released_at_the_next_start(db_path, clock):
    with Store(db_path) as first:
        threads = records(first, clock)
        threads.start("thread_a", "msg_1", state("one"))
        threads.claim("msg_1")
    with Store(db_path) as second:
        assert records(second, clock).claim("msg_1").state == state("one")
