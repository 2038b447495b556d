"""Tiny LoRA adapters for the tiny models of tinymodel.py, as llama.cpp's convert_lora_to_gguf.py writes them.

An adapter is a GGUF whose header says ``general.type = adapter`` and ``adapter.type = lora``,
with ``adapter.lora.alpha`` and, for each adapted matrix W of the base (n_out × n_in), a pair
``W.lora_a`` (rank × n_in) and ``W.lora_b`` (n_out × rank): llama.cpp adds
``scale × alpha / rank × B·A·x`` to ``W·x``. :func:`write_tiny_lora` adapts the output matrix
(``output.weight``) with a random pair much stronger than the base's own weights: at scale 1
the adapter's product decides the greedy token, so each adapter (each `seed`) has greedy text
of its own, and at scale 0 the text is the base's. A test tells at a glance which one ran.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tinymodel import tiny_vocab, write_gguf

__all__ = ["write_tiny_lora"]

RANK = 4


def write_tiny_lora(path: str | os.PathLike[str], *, seed: int = 0, n_embd: int = 64, arch: str = "llama",
                    special_tokens: Sequence[Any] = (), strength: float = 1.0, base_name: str | None = None) -> Path:
    """A rank-4 adapter of the tiny base's output matrix. `arch` is the architecture the header
    names (another than the base's makes llama.cpp refuse it); `n_embd` and `special_tokens` must
    be the base's (others make the pair's shapes wrong for it); `base_name` goes to
    general.base_model.0.name, as the converter writes it."""
    rng = np.random.default_rng(seed)
    lora_a = (rng.standard_normal((RANK, n_embd)) / np.sqrt(n_embd)).astype(np.float32)
    lora_b = (rng.standard_normal((len(tiny_vocab(special_tokens)), RANK)) * strength).astype(np.float32)
    meta: dict = {"general.type": "adapter", "adapter.type": "lora", "adapter.lora.alpha": float(RANK),
                  "general.name": Path(path).stem}
    if base_name is not None:
        meta["general.base_model.count"] = 1
        meta["general.base_model.0.name"] = base_name
    write_gguf(path, arch, meta, [("output.weight.lora_a", lora_a), ("output.weight.lora_b", lora_b)])
    return Path(path)
