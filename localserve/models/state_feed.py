"""The models' state changes, in order, for whoever follows them (GET /models/sse).

A Record (record.py) publishes each change of its state, and of its load's progress; each
change gets the next number.
A follower starts at latest(), then waits for the changes past the last it saw: asleep until
one is published, its timeout runs out, or the feed closes (the server drains). Nothing polls.
The last FEED_KEPT changes are kept: a follower that fell further behind (its socket stalled)
misses the oldest, as a slow llama-server SSE client would.
"""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

FEED_KEPT = 256         # changes kept for followers that are behind


@dataclass(frozen=True)
class StateChange:
    number: int
    model: str
    state: str                      # states.py
    error: str | None = None        # unloaded by a load that failed: why
    progress: dict | None = None    # loading: {"stages", "current", "value"} (llama-server's)


class StateFeed:
    def __init__(self, kept: int = FEED_KEPT):
        self._cond = threading.Condition()
        self._changes: collections.deque[StateChange] = collections.deque(maxlen=kept)
        self._next = 0
        self.closed = False

    def publish(self, model: str, state: str, error: str | None = None, progress: dict | None = None) -> None:
        with self._cond:
            self._changes.append(StateChange(self._next, model, state, error, progress))
            self._next += 1
            self._cond.notify_all()

    def latest(self) -> int:
        """The number the next change will have: a new follower sees changes from it on."""
        with self._cond:
            return self._next

    def wait(self, since: int, timeout: float) -> list[StateChange]:
        """The changes numbered `since` and later, once there is one (an empty list when
        `timeout` seconds pass first, or the feed is closed)."""
        with self._cond:
            self._cond.wait_for(lambda: self._next > since or self.closed, timeout)
            return [change for change in self._changes if change.number >= since]

    def close(self) -> None:
        """Wake every follower for good: the server is stopping."""
        with self._cond:
            self.closed = True
            self._cond.notify_all()
