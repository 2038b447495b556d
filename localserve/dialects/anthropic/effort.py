"""Anthropic's effort as the reasoning budget a thinking model is given."""

from __future__ import annotations

# Anthropic's output_config.effort (and adaptive thinking, whose default effort is high)
# as a reasoning budget in tokens; None: unlimited.
EFFORT_BUDGETS: dict[str, int | None] = {"low": 1024, "medium": 4096, "high": 16384, "xhigh": 32768,
                                         "max": None}
DEFAULT_EFFORT = "high"
