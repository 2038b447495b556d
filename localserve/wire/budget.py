"""The in-flight body budget: how many request-body bytes the server holds at once.

One request's working memory is a small multiple of its body (the bytes, the parsed JSON,
the rendered prompt), so bounding the bodies being read or handled at once bounds the memory
the connections can make the process take, whatever they send (--max-inflight-bytes). A
connection holds its request's body bytes as they arrive (never what the framing announces:
four connections announcing 32 MiB and sending a byte now and then would otherwise hold the
whole budget for the price of 600 bytes) until the answer is written, and never more than its
share, one largest body; a request whose bytes would take the total past the limit gets a 503.
"""

from __future__ import annotations

import threading


class ByteBudget:
    def __init__(self, limit: int):
        self.limit = limit
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    def take(self, n: int) -> bool:
        with self._lock:
            if self._used + n > self.limit:
                return False
            self._used += n
            return True

    def give(self, n: int) -> None:
        with self._lock:
            self._used -= n


class Held:
    """What one connection holds of the budget; grows with its body up to its share, returned
    all at once."""

    def __init__(self, budget: ByteBudget, share: int):
        self.budget = budget
        self.share = share
        self.amount = 0

    def grow_to(self, n: int) -> bool:
        if n <= self.amount:
            return True
        if n > self.share or not self.budget.take(n - self.amount):
            return False
        self.amount = n
        return True

    def release(self) -> int:
        amount, self.amount = self.amount, 0
        self.budget.give(amount)
        return amount
