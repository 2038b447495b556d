"""Tiny LoRA adapters for the tiny models of tinymodel.py, as llama.cpp's convert_lora_to_gguf.py writes them.

An adapter is a GGUF whose header says ``general.type = adapter`` and ``adapter.type = lora``,
with ``adapter.lora.alpha`` and, for each adapted matrix W of the base (n_out × n_in), a pair
``W.lora_a`` (rank × n_in) and ``W.lora_b`` (n_out × rank): llama.cpp adds
``scale × alpha / rank × B·A·x`` to ``W·x``. :func:`write_tiny_lora` adapts the base's output
matrix (``output.weight``) with a random pair about as strong as the base's own weights: at
scale 1 each adapter (each `seed`) has greedy text of its own, at scale 0 the text is the
base's, and a scale in between gives text of its own again. A test tells at a glance which
adapter ran.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from gguf import GGUFReader

from tinymodel import write_gguf

__all__ = ["write_tiny_lora"]

RANK = 4


def write_tiny_lora(path: str | os.PathLike[str], base: str | os.PathLike[str], *, seed: int = 0,
                    arch: str | None = None, n_embd: int | None = None, strength: float = 1.0,
                    base_name: str | None = None) -> Path:
    """A rank-4 adapter of `base`'s output matrix (its shape read from the base's file). `arch`
    is the architecture the header names (by default the base's; another makes llama.cpp
    refuse it); `n_embd`, when given another than the base's, makes the pair's shapes wrong for
    it (llama.cpp refuses it too); `base_name` goes to general.base_model.0.name, as the
    converter writes it."""
    reader = GGUFReader(str(base))
    output = next(t for t in reader.tensors if t.name == "output.weight")
    base_embd, n_vocab = (int(n) for n in output.shape[:2])        # ggml's order: n_in, n_out
    base_arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    n_in = n_embd or base_embd
    rng = np.random.default_rng(seed)
    lora_a = (rng.standard_normal((RANK, n_in)) / np.sqrt(n_in)).astype(np.float32)
    lora_b = (rng.standard_normal((n_vocab, RANK)) * strength).astype(np.float32)
    meta: dict = {"general.type": "adapter", "adapter.type": "lora", "adapter.lora.alpha": float(RANK),
                  "general.name": Path(path).stem}
    if base_name is not None:
        meta["general.base_model.count"] = 1
        meta["general.base_model.0.name"] = base_name
    write_gguf(path, arch or base_arch, meta, [("output.weight.lora_a", lora_a), ("output.weight.lora_b", lora_b)])
    return Path(path)
