"""Where a model load's time goes: each step's milliseconds, for the debug log."""

from __future__ import annotations

import time


class Stopwatch:
    def __init__(self):
        self.started = self._last = time.perf_counter()
        self.steps: list[tuple[str, float]] = []

    def lap(self, step: str) -> None:
        """`step` ends now: it took the time since the last lap (or the start)."""
        now = time.perf_counter()
        self.steps.append((step, now - self._last))
        self._last = now

    @property
    def seconds(self) -> float:
        return self._last - self.started

    def __str__(self) -> str:
        return ", ".join(f"{step} {seconds * 1000:.0f} ms" for step, seconds in self.steps)
