"""How much memory a model will take, worked out from its file before it loads.

The manager makes room under --max-memory with this figure before the load starts (and checks
the process's real growth after it).
"""

from __future__ import annotations

import os
from typing import Sequence

from ..engine.gguf_meta import estimate, read_shape
from ..engine.model_load import ModelLoadError, check_model_file
from ..settings import MAX_DEFAULT_CTX, Settings, step_drafts
from .loaded import LoadFailed

COMPUTE_RESERVE_BYTES = 32 * 1024 * 1024   # memory estimate: llama.cpp's compute buffers, besides weights + KV


def estimate_bytes(path: str, settings: Settings, adapters: Sequence[str] = ()) -> int:
    """Bytes the model at `path` will take loaded with `settings`: weights, KV cache, compute and,
    for speculative decoding, the draft outputs and draft model; and its LoRA `adapters`' weights
    (files). LoadFailed for a file that is no model; a file whose header cannot be read is
    llama.cpp's to refuse."""
    try:
        check_model_file(path)
    except ModelLoadError as exc:
        raise LoadFailed(str(exc)) from None
    try:
        shape = read_shape(path)
    except ModelLoadError:
        return os.path.getsize(path) + COMPUTE_RESERVE_BYTES     # llama.cpp will say what is wrong
    n_ctx_seq = settings.ctx_size or min(shape.n_ctx_train or MAX_DEFAULT_CTX, MAX_DEFAULT_CTX)
    drafting = settings.speculative != "off"
    need = estimate(shape, n_ctx_seq=n_ctx_seq, n_seq=settings.slots, n_batch=settings.batch_size,
                    reserve=COMPUTE_RESERVE_BYTES,
                    drafted_rows=step_drafts(settings.draft_max) if drafting else 0).total
    if settings.mmproj and os.path.isfile(settings.mmproj):    # the vision projector: its weights, and
        need += os.path.getsize(settings.mmproj) + COMPUTE_RESERVE_BYTES    # its encoder's compute
    need += sum(os.path.getsize(adapter) for adapter in adapters if os.path.isfile(adapter))
    if settings.speculative == "draft":     # the draft model's weights, KV and compute
        try:
            need += estimate(read_shape(settings.draft_model), n_ctx_seq=n_ctx_seq, n_seq=settings.slots,
                             n_batch=settings.batch_size, reserve=0).total
        except ModelLoadError:
            pass        # the load will say what is wrong with it
    return need
