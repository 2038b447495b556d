"""Anthropic Message Threads held for the API key that made them: a thread's conversation as
the next turn needs it, found by the id of any reply it gave.

A thread is one row: its state (the `system`, `tools` and messages its turns sent, each reply
after its turn, as JSON), the id of its latest reply, and when it was last used. Each reply id
it gave is a row of thread_messages, so a continue from an older one is told apart from one
from an id never seen: a thread continues only from its latest reply, once.

A continue claims the thread (`continuing`) while its answer runs: a second continue from the
same reply meanwhile is refused, and the claim ends when the reply is kept (the thread moves
on) or released (the answer failed: the same continue may come again). The thread's state is
written whole each turn, and the row of the turn before is that same row: a thread's rows do
not pile up as it grows.

Bounds, for each key: the THREADS_PER_KEY most recently used threads, THREAD_BYTES_PER_KEY of
state together, each unused for at most THREAD_MAX_AGE seconds; past them the oldest go first
(a claimed thread is spared until its turn ends). A thread larger than the bytes alone is not
held at all. A thread no longer held is what the API calls not found: the client sends the
whole conversation again under a new thread.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import orjson

from .sql import (ADVANCE_THREAD, CLAIM_THREAD, DELETE_EXPIRED_THREADS, DELETE_THREADS_PAST_BYTES,
                  DELETE_THREADS_PAST_COUNT, DELETE_THREADS_TOO_LARGE, INSERT_THREAD, INSERT_THREAD_MESSAGE,
                  RELEASE_THREAD, SELECT_THREAD_HELD, SELECT_THREAD_OF)

if TYPE_CHECKING:
    import sqlite3

    from .store import Store

THREADS_PER_KEY = 1000
THREAD_BYTES_PER_KEY = 256 * 1024 * 1024
THREAD_MAX_AGE = 24 * 3600.0       # seconds since the thread's last turn

# why a continue finds no thread to go on from (the dialect says each its own way)
NOT_FOUND = "not_found"                  # no such reply id for this key, or its thread is gone
ALREADY_CONTINUED = "already_continued"  # the reply is not its thread's latest
IN_FLIGHT = "in_flight"                  # another continue from the same reply is running


@dataclass(frozen=True)
class ThreadLimits:
    count: int = THREADS_PER_KEY
    bytes: int = THREAD_BYTES_PER_KEY
    max_age: float = THREAD_MAX_AGE


class ThreadMiss(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class HeldThread:
    """A thread claimed by one continue: its id, the reply it goes on from, its state."""
    id: str
    previous_message_id: str
    state: dict


class ThreadRecords:
    """The threads of one key (the scope of `store`, a Store.scoped view)."""

    def __init__(self, store: Store, limits: ThreadLimits = ThreadLimits(),
                 clock: Callable[[], float] = time.time):
        self.store = store
        self.limits = limits
        self.clock = clock

    def start(self, thread_id: str, reply_id: str, state: dict) -> bool:
        """A new thread whose first reply is `reply_id`; False when it is too large to hold."""
        text = orjson.dumps(state).decode()
        now = self.clock()
        with self.store.transaction() as db:
            db.execute(INSERT_THREAD, (thread_id, self.store.scope, reply_id, text, len(text), now, now))
            db.execute(INSERT_THREAD_MESSAGE, (reply_id, thread_id))
            self._prune(db, now)
            return self._held(db, thread_id)

    def claim(self, previous_message_id: str) -> HeldThread:
        """The thread whose latest reply is `previous_message_id`, claimed for one continue;
        ThreadMiss (NOT_FOUND, ALREADY_CONTINUED, IN_FLIGHT) when there is none to go on from."""
        with self.store.transaction() as db:
            row = db.execute(SELECT_THREAD_OF, (previous_message_id, self.store.scope)).fetchone()
            if row is None or row[4] < self.clock() - self.limits.max_age:
                raise ThreadMiss(NOT_FOUND)
            thread_id, latest, state, continuing, _ = row
            if latest != previous_message_id:
                raise ThreadMiss(ALREADY_CONTINUED)
            if continuing:
                raise ThreadMiss(IN_FLIGHT)
            db.execute(CLAIM_THREAD, (thread_id,))
        return HeldThread(thread_id, previous_message_id, orjson.loads(state))

    def advance(self, held: HeldThread, reply_id: str, state: dict) -> bool:
        """The claimed thread goes on to `reply_id` with `state`, and its claim ends; False when
        it is no longer held (pruned meanwhile, or too large now)."""
        text = orjson.dumps(state).decode()
        now = self.clock()
        with self.store.transaction() as db:
            moved = db.execute(ADVANCE_THREAD, (reply_id, text, len(text), now, held.id, self.store.scope,
                                                held.previous_message_id)).rowcount
            if not moved:
                return False
            db.execute(INSERT_THREAD_MESSAGE, (reply_id, held.id))
            self._prune(db, now)
            return self._held(db, held.id)

    def release(self, held: HeldThread) -> None:
        """The continue ended without a reply to keep: the thread waits at the same reply."""
        with self.store.transaction() as db:
            db.execute(RELEASE_THREAD, (held.id, self.store.scope))

    def _prune(self, db: sqlite3.Connection, now: float) -> None:
        db.execute(DELETE_EXPIRED_THREADS, (now - self.limits.max_age,))
        db.execute(DELETE_THREADS_PAST_COUNT, (self.store.scope, self.limits.count))
        db.execute(DELETE_THREADS_TOO_LARGE, (self.store.scope, self.limits.bytes))
        db.execute(DELETE_THREADS_PAST_BYTES, (self.store.scope, self.limits.bytes))

    def _held(self, db: sqlite3.Connection, thread_id: str) -> bool:
        return db.execute(SELECT_THREAD_HELD, (thread_id,)).fetchone() is not None
