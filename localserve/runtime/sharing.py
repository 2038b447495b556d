"""Prefix sharing for one model's runtime: whether its sequences can hand a prefix on, and the
one log line that says when they cannot."""

from __future__ import annotations

import logging
from typing import Protocol

from ..engine.kv_share import SHARING_OFF

log = logging.getLogger("localserve.runtime")


class SequenceCopier(Protocol):
    """What sharing needs of the engine (engine.Engine is one)."""
    copy_blocker: str | None

    def can_copy(self, src: int, n: int) -> bool: ...


class PrefixSharing:
    def __init__(self, engine: SequenceCopier):
        blocker = engine.copy_blocker
        self.on = blocker is None
        self.can_copy = engine.can_copy if self.on else None     # the scheduler's: None when off
        if blocker is not None and blocker != SHARING_OFF:     # a model's limit, not the user's choice
            log.info("prefix sharing is off for this model (%s): each sequence computes its own prompt", blocker)
