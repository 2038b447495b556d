"""A request's own context size (Ollama's `num_ctx`), checked before it waits for its model.

Ollama's clients size the context themselves: LlamaIndex asks the model's training context
(read from /api/show) and packs its prompt to it; Cline, Aider and Goose send theirs. As Ollama
does, a request asking more context than the model is loaded with has the model loaded again
with that much (the manager waits for the requests in flight first). What it asks is bounded:
past the model's training context it gets the training context (Ollama clamps it so too,
and positions past it are noise); a context whose KV cache would pass --max-memory is refused,
naming the limit. Asking for no more than the model's configured context changes nothing.
"""

from __future__ import annotations

import dataclasses
import logging

from ..engine.gguf_header import HeaderError, read_header
from ..settings import MAX_DEFAULT_CTX, Settings
from .catalogue import ModelEntry
from .errors import BadModelRequest
from .footprint import estimate_bytes
from .loaded import LoadFailed

log = logging.getLogger("localserve.models")

MiB = 1024 * 1024


def wanted_context(entry: ModelEntry, server: Settings, n_ctx: int | None) -> int | None:
    """The context per sequence a request's num_ctx asks of `entry`: None when it asks for no
    more than the model's configured context; clamped to the training context; BadModelRequest
    when its memory would pass --max-memory."""
    if n_ctx is None:
        return None
    try:
        trained = read_header(entry.path).context_length     # kept per file: a request reads nothing
    except HeaderError:
        return None             # the load says what is wrong with the file
    settings = entry.settings(server)
    configured = settings.ctx_size or min(trained or MAX_DEFAULT_CTX, MAX_DEFAULT_CTX)
    if trained and n_ctx > trained:
        log.info("model %s: num_ctx %d is more than its training context (%d): %d it is", entry.name, n_ctx,
                 trained, trained)
        n_ctx = trained
    if n_ctx <= configured:
        return None
    limit = server.max_memory
    if limit is not None:
        try:
            need = estimate_bytes(entry.path, dataclasses.replace(settings, ctx_size=n_ctx),
                                  [f.path for f in entry.adapter_files()])
        except LoadFailed:
            return None         # the load says what is wrong with the file
        if need > limit:
            raise BadModelRequest(f"num_ctx {n_ctx} needs about {need // MiB} MiB for model '{entry.name}' "
                                  f"(weights, and a KV cache of {n_ctx} tokens for each of {settings.slots} slot(s)), "
                                  f"more than --max-memory ({limit // MiB} MiB); ask for less, at most the "
                                  f"{configured} it is served with", param="num_ctx", code="context_too_large")
    return n_ctx
