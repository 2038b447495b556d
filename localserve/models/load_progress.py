"""How far a model's load is, told as llama-server's router tells it on /models/sse:
`{"stages": [...], "current": stage, "value": 0..1}`, the stages in the order they load.

llama.cpp reports the main model's weights as they are read (llama_model_params'
progress_callback, called on the loader thread, often: every tensor); the vision projector and
the draft model are reported as they start and end. As llama-server does, the first and the
last report of a stage always go out and the others at most every LOAD_PROGRESS_INTERVAL: a
report wakes every /models/sse follower.
"""

from __future__ import annotations

import time
from typing import Callable

from ..settings import Settings

LOAD_PROGRESS_INTERVAL = 0.2       # seconds between two reports of one stage's progress

TEXT_MODEL, MMPROJ_MODEL, SPEC_MODEL = "text_model", "mmproj_model", "spec_model"

Report = Callable[[list[str], str, float], None]     # (stages, the stage loading, its fraction)


def load_stages(settings: Settings) -> list[str]:
    """What this load reads, in the order the loader reads it (models/loaded.py)."""
    stages = [TEXT_MODEL]
    if settings.mmproj:
        stages.append(MMPROJ_MODEL)
    if settings.speculative == "draft":
        stages.append(SPEC_MODEL)
    return stages


class LoadProgress:
    def __init__(self, stages: list[str], report: Report, clock: Callable[[], float] = time.monotonic):
        self.stages = stages
        self.report = report
        self.clock = clock
        self._last: dict[str, float] = {}

    def __call__(self, stage: str, value: float) -> None:
        """`stage` is `value` of the way through (throttled: see the module's comment)."""
        if stage not in self.stages:
            return
        now = self.clock()
        last = self._last.get(stage)
        if last is not None and value < 1.0 and now - last < LOAD_PROGRESS_INTERVAL:
            return
        self._last[stage] = now
        self.report(self.stages, stage, min(1.0, max(0.0, value)))

    def stage(self, stage: str) -> Callable[[float], None]:
        """The callback for one stage's fractions (the engine's progress_callback)."""
        return lambda value: self(stage, value)
