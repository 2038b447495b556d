"""Ollama's times: RFC 3339 timestamps and durations in integer nanoseconds."""

from __future__ import annotations

import time
from datetime import datetime, timezone

FOREVER = "9999-12-31T23:59:59Z"     # expires_at of a model kept loaded for good (Ollama's is as far off)


def timestamp(seconds: float | None = None) -> str:
    """RFC 3339 in UTC with microseconds, as Go's time.Time marshals (Z, not +00:00)."""
    moment = datetime.fromtimestamp(time.time() if seconds is None else seconds, timezone.utc)
    return moment.isoformat(timespec="microseconds").replace("+00:00", "Z")


def nanoseconds(milliseconds: float) -> int:
    return int(round(milliseconds * 1_000_000))


def expires_at(monotonic_deadline: float | None) -> str:
    """When a loaded model's keep-alive runs out, on the wall clock (FOREVER: never, or later
    than a date can say: /api/ps answers whatever deadline is stored)."""
    if monotonic_deadline is None:
        return FOREVER
    try:
        return timestamp(time.time() + max(0.0, monotonic_deadline - time.monotonic()))
    except (OverflowError, ValueError, OSError):       # past year 9999, or NaN: no date says it
        return FOREVER
