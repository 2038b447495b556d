"""The model a bench section runs when none is given: the demo model, fetched as `make run` does."""

from __future__ import annotations

import sys


def model_or_demo(model: str | None) -> str | None:
    """The given model, else the demo model's path; None (with the reason on stderr) when there is none."""
    if model is not None:
        return model
    from localserve.ops.demo import DemoUnavailable, demo_model_path
    try:
        return demo_model_path()
    except DemoUnavailable as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return None
