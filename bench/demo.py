"""The model a bench section runs when none is given: Gemma 3 270M (bench/gemma.py), on which
docs/performance.rst's figures were measured."""

from __future__ import annotations

import sys


def model_or_demo(model: str | None) -> str | None:
    """The given model, else Gemma 3 270M's path; None (with the reason on stderr) when there is none."""
    if model is not None:
        return model
    from .gemma import GemmaUnavailable, gemma_model_path
    try:
        return gemma_model_path()
    except GemmaUnavailable as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return None
