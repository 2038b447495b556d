"""Which vision projector in a --models-dir belongs to which model.

A GGUF whose file name has "mmproj" in it is a projector, never a model of its own. Each
projector goes to the model it is named after: the model whose name shares the longest start
with the projector's name less "mmproj" (``mmproj-SmolVLM-256M-Instruct-f16.gguf`` →
``SmolVLM-256M-Instruct-Q8_0``; ``gemma-3-4b-it-mmproj.gguf`` → ``gemma-3-4b-it-Q4_K_M``),
at least MIN_SHARED characters of it and more than any other model shares. In a directory of
one model, a projector is that model's whatever its name. A model takes one projector: the
first by name, when several are named after it.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("localserve.models")

PROJECTOR_MARK = "mmproj"
MIN_SHARED = 4          # characters a projector's name must share with its model's


def is_projector(filename: str) -> bool:
    return PROJECTOR_MARK in filename.lower()


def pair_projectors(models: dict[str, str], projectors: list[str]) -> dict[str, str]:
    """{model name: projector path} for `models` ({name: path}) and the projector files' paths."""
    paired: dict[str, str] = {}
    for path in sorted(projectors):
        name = _model_for(models, path)
        if name is None:
            log.warning("vision projector %s: no model in its directory is named after it; not used", path)
        elif name in paired:
            log.warning("vision projector %s: model '%s' has %s already; not used", path, name, paired[name])
        else:
            paired[name] = path
    return paired


def _model_for(models: dict[str, str], projector_path: str) -> str | None:
    if len(models) == 1:
        return next(iter(models))
    key = _projector_key(projector_path)
    shared = {name: _shared_start(name.lower(), key) for name in models}
    best = max(shared.values(), default=0)
    winners = [name for name, n in shared.items() if n == best]
    return winners[0] if best >= MIN_SHARED and len(winners) == 1 else None


def _projector_key(path: str) -> str:
    stem = os.path.basename(path).lower().removesuffix(".gguf")
    return stem.replace(PROJECTOR_MARK, "").strip("-_. ")


def _shared_start(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
