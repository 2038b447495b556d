"""llama-server's POST /embedding (and /embeddings): its own shape, or OpenAI's.

A body with `content` (a string, strings, token ids or token-id lists, as /v1/embeddings'
`input`) is answered in llama-server's shape: `[{"index": i, "embedding": [[...]]}]`, one
pooled vector per input (llama-server gives every token's vector only under --pooling none,
which is not served here), normalised as `embd_normalize` says: -1 none, 0 max absolute
(scaled to int16's range), 1 taxicab, 2 Euclidean (the default), p > 2 the p-norm. A body
with `input` instead is answered as /v1/embeddings answers it, as llama-server does.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..embedding_runs import model_for, run
from ..exchange import Exchange, RouteTable
from ..fields import invalid, read_bool, read_int
from ..openai import embeddings as openai_embeddings
from ..rerank import handlers as rerank
from ..services import Services
from .errors import LLAMA_ERRORS

INT16_RANGE = 32760.0        # embd_normalize 0 scales the largest component to this (llama.cpp's common)


def add_routes(table: RouteTable, services: Services) -> None:
    for path in ("/embedding", "/embeddings"):
        table.add(path, "POST", partial(handle, services), errors=LLAMA_ERRORS)
    for path in ("/reranking", "/v1/reranking"):        # /rerank and /v1/rerank's other names
        table.add(path, "POST", partial(rerank.handle, services), errors=LLAMA_ERRORS)


def handle(services: Services, exchange: Exchange) -> None:
    body = exchange.json()
    if "content" not in body:
        if "input" in body:
            openai_embeddings.handle(services, exchange)
            return
        raise invalid("content", "is required: the text (or texts, or token ids) to embed")
    with model_for(exchange, services, body) as model:
        if model.spec.ranks:
            raise invalid("model", f"'{model.model_id}' is a reranker (pooling rank): it scores pairs at "
                                   f"/reranking and has no embeddings")
        norm = read_int(body, "embd_normalize", low=-1, default=2)
        inputs = openai_embeddings.read_inputs(model, body["content"], read_bool(body, "truncate"), "content")
        vectors = run(exchange, model, inputs)
    services.metrics.record_embedding("embeddings", len(inputs), sum(len(t) for t in inputs), model.model_id)
    exchange.send_json([{"index": i, "embedding": [normalised(v, norm).astype(np.float32).tolist()]}
                        for i, v in enumerate(vectors)])


def normalised(vector: np.ndarray, norm: int) -> np.ndarray:
    """llama.cpp's common_embd_normalize."""
    vector = vector.astype(np.float64)
    if norm < 0:
        return vector
    if norm == 0:
        scale = float(np.abs(vector).max()) / INT16_RANGE
    elif norm == 2:
        scale = float(np.sqrt((vector * vector).sum()))
    else:
        scale = float((np.abs(vector) ** norm).sum() ** (1.0 / norm))
    return vector / scale if scale > 0 else vector
