"""POST /v1/embeddings in OpenAI's shape.

`input`: a string, a list of strings, a list of token ids, or a list of token-id lists;
`encoding_format`: float (default) or base64 (little-endian float32, as the openai SDK decodes
it); `dimensions`: keep the first N, then normalise again; `user`: ignored; `truncate` (an
extension): cut an input longer than the embedding context instead of a 400. Vectors are
L2-normalised, as OpenAI's are.
"""

from __future__ import annotations

import base64
from typing import Any

import numpy as np

from ..embedding_runs import EmbeddingModel, check_tokens, context_exceeded, fit, model_for, run
from ..exchange import Exchange
from ..fields import invalid, read_bool, read_int, read_str
from ..services import Services
from ...engine.facade import TooManyTokens


def handle(services: Services, exchange: Exchange) -> None:
    body = exchange.json()
    with model_for(exchange, services, body) as model:
        if model.spec.ranks:
            raise invalid("model", f"'{model.model_id}' is a reranker (pooling rank): it scores pairs at "
                                   f"/v1/rerank and has no embeddings")
        encoding = read_str(body, "encoding_format", "float", choices=("float", "base64"))
        dimensions = read_int(body, "dimensions", low=1, high=model.spec.n_out)
        inputs = read_inputs(model, body.get("input"), read_bool(body, "truncate"))
        vectors = run(exchange, model, inputs)
    n_tokens = sum(len(tokens) for tokens in inputs)
    services.metrics.record_embedding("embeddings", len(inputs), n_tokens, model.model_id)
    data = [{"object": "embedding", "index": i, "embedding": encode(normalised(v, dimensions), encoding)}
            for i, v in enumerate(vectors)]
    exchange.send_json({"object": "list", "data": data, "model": model.model_id,
                        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})


def read_inputs(model: EmbeddingModel, value: Any, truncate: bool, param: str = "input") -> list[list[int]]:
    """`input` (llama-server's /embedding: `content`) as token sequences, each checked against
    the embedding context."""
    if isinstance(value, str):
        items: list = [value]
    elif isinstance(value, list) and value and all(type(t) is int for t in value):
        items = [value]     # one input given as token ids
    elif isinstance(value, list):
        items = value
    else:
        raise invalid(param, "expected a string, an array of strings, an array of token ids or an array "
                             "of token-id arrays")
    if not items:
        raise invalid(param, "is an empty array; give at least one input")
    if len(items) > model.max_inputs:
        raise invalid(param, f"has {len(items)} inputs; at most {model.max_inputs} are taken in one call "
                             f"(--max-embedding-inputs)")
    if not all(isinstance(item, (str, list)) for item in items):
        raise invalid(param, "expected strings, token ids (integers) or token-id arrays")
    if not (all(isinstance(item, str) for item in items) or all(isinstance(item, list) for item in items)):
        raise invalid(param, "mixes strings and token arrays; send one kind")
    return [read_one(model, item, i, truncate, param) for i, item in enumerate(items)]


def read_one(model: EmbeddingModel, item: str | list, index: int, truncate: bool, param: str = "input") -> list[int]:
    if isinstance(item, list):
        return fit(model, check_tokens(model, item, param), param, index, truncate)
    if not item:
        raise invalid(param, f"{param}[{index}] is an empty string; OpenAI refuses those too")
    tokens = tokenize(model, item, index, truncate, param)
    ends_with_added = model.spec.pair_tokens[1] is not None or model.spec.pair_tokens[2] is not None
    return fit(model, tokens, param, index, truncate, keeps_last=ends_with_added)


def tokenize(model: EmbeddingModel, text: str, index: int, truncate: bool, param: str = "input") -> list[int]:
    """Tokens of one text, with the model's own BOS/EOS/SEP; only as much of a huge text as can
    matter is tokenized (a cut input's tokens come from a prefix of at least that many)."""
    limit = model.spec.max_tokens
    if truncate:
        text = text[:(limit + 1) * model.engine.max_piece_bytes]
    try:
        return model.engine.tokenize(text, add_special=True, parse_special=True,
                                     limit=None if truncate else limit)
    except TooManyTokens as exc:
        raise context_exceeded(param, index, exc.at_least, limit) from None


def normalised(vector: np.ndarray, dimensions: int | None) -> np.ndarray:
    if dimensions is not None:
        vector = vector[:dimensions]
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def encode(vector: np.ndarray, encoding: str) -> Any:
    if encoding == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    return vector.astype(np.float32).tolist()
