"""Which vision projector in a --models-dir belongs to which model.

A GGUF whose file name has "mmproj" in it is a projector, never a model of its own. Each
projector goes to the models it is named after: those whose name shares the longest start
with the projector's name less "mmproj" (``mmproj-SmolVLM-256M-Instruct-f16.gguf`` →
``SmolVLM-256M-Instruct-Q8_0``; ``gemma-3-4b-it-mmproj.gguf`` → ``gemma-3-4b-it-Q4_K_M``
and ``gemma-3-4b-it-Q8_0`` both), at least MIN_SHARED characters of it. In a directory of
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
        names = _models_for(models, path)
        if not names:
            log.warning("vision projector %s: no model in its directory is named after it; not used", path)
        for name in names:
            if name in paired:
                log.warning("vision projector %s: model '%s' has %s already", path, name, paired[name])
            else:
                paired[name] = path
    return paired


def _models_for(models: dict[str, str], projector_path: str) -> list[str]:
    if len(models) == 1:
        return list(models)
    key = _projector_key(projector_path)
    shared = {name: _shared_start(name.lower(), key) for name in models}
    best = max(shared.values(), default=0)
    return [name for name, n in shared.items() if n == best] if best >= MIN_SHARED else []


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
