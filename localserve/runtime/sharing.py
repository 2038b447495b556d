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

    def can_copy(self, src: int, n: int) -> bool: ...


class PrefixMetrics(Protocol):
    def record_prefix(self, source: str, tokens: int, waited: bool) -> None: ...


class PrefixSharing:
    def __init__(self, engine: SequenceCopier):
        blocker = engine.copy_blocker
        self.on = blocker is None
        self.can_copy = engine.can_copy if self.on else None     # the scheduler's: None when off
        if blocker is not None and blocker != "prefix sharing is off":
            log.info("prefix sharing is off for this model (%s): each sequence computes its own prompt", blocker)

    def record(self, metrics: PrefixMetrics, origin: PrefixOrigin, waited: bool) -> None:
        metrics.record_prefix(origin.source, origin.tokens, waited)
