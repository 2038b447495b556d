"""Prefix sharing for one model's runtime: whether its sequences can hand a prefix on, the
one log line that says when they cannot, and the counts of what was copied."""

from __future__ import annotations

import logging
from typing import Protocol

from .kvslots import PrefixOrigin

log = logging.getLogger("localserve.runtime")


class SequenceCopier(Protocol):
    """What sharing needs of the engine (engine.Engine is one)."""
    copy_blocker: str | None
    n_swa: int

    def can_copy(self, src: int, n: int) -> bool: ...


class PrefixMetrics(Protocol):
    def record_prefix(self, source: str, tokens: int, waited: bool) -> None: ...


class PrefixSharing:
    def __init__(self, engine: SequenceCopier):
        self.engine = engine
        blocker = engine.copy_blocker
        self.on = blocker is None
        # A sliding window drops the head as its holder moves on: waiting for a head another job is
        # prefilling would mostly end with nothing left to copy.
        self.waits = self.on and engine.n_swa <= 0
        self._window_said = False
        if blocker is not None and blocker != "prefix sharing is off":
            log.info("prefix sharing is off for this model (%s): each sequence computes its own prompt", blocker)

    def can_copy(self, src: int, n: int) -> bool:
        if self.engine.can_copy(src, n):
            return True
        if self.engine.n_swa > 0 and not self._window_said:
            self._window_said = True
            log.info("sliding-window model: a prefix another sequence holds is copied only while that "
                     "sequence's window still covers its end; otherwise it is computed again")
        return False

    def record(self, metrics: PrefixMetrics, origin: PrefixOrigin, waited: bool) -> None:
        metrics.record_prefix(origin.source, origin.tokens, waited)
