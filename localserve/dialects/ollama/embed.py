"""POST /api/embed and the older POST /api/embeddings, through the embeddings path.

/api/embed: `input` a string or a list of strings → `embeddings`, L2-normalised as Ollama's
are, cut to `dimensions` when asked; `truncate` (Ollama's default: true) cuts an input longer
than the embedding context instead of a 400. /api/embeddings: `prompt` → `embedding`, the
vector as the model pooled it (Ollama leaves that one unnormalised).
"""

from __future__ import annotations

import time

from ..embedding_runs import model_for, run
from ..exchange import Exchange
from ..fields import invalid, kind_of, read_bool, read_int
from ..openai.embeddings import normalised, read_inputs
from ..services import Services
from .names import model_request, requested_name


def embed(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    started = time.perf_counter_ns()
    body = exchange.json()
    name = requested_name(body)
    value = body.get("input")
    if not (isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))):
        raise invalid("input", f"expected a string or an array of strings, got {kind_of(value)}")
    truncate = read_bool(body, "truncate", default=True)
    with model_for(exchange, services, model_request(models, body)) as model:
        loaded = time.perf_counter_ns()
        if model.spec.ranks:
            raise invalid("model", f"'{model.model_id}' is a reranker: it has no embeddings")
        dimensions = read_int(body, "dimensions", low=1, high=model.spec.n_out)
        inputs = read_inputs(model, value, truncate) if value != [] else []
        vectors = run(exchange, model, inputs) if inputs else []
    n_tokens = sum(len(tokens) for tokens in inputs)
    services.metrics.record_embedding("embeddings", len(inputs), n_tokens, model.model_id)
    exchange.send_json({"model": name, "embeddings": [normalised(v, dimensions).tolist() for v in vectors],
                        "total_duration": time.perf_counter_ns() - started, "load_duration": loaded - started,
                        "prompt_eval_count": n_tokens})


def embeddings(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    body = exchange.json()
    prompt = body.get("prompt", "")
    if not isinstance(prompt, str):
        raise invalid("prompt", f"expected a string, got {kind_of(prompt)}")
    with model_for(exchange, services, model_request(models, body)) as model:
        if model.spec.ranks:
            raise invalid("model", f"'{model.model_id}' is a reranker: it has no embeddings")
        if not prompt:
            exchange.send_json({"embedding": []})
            return
        inputs = read_inputs(model, prompt, True)
        vector = run(exchange, model, inputs)[0]
    services.metrics.record_embedding("embeddings", 1, len(inputs[0]), model.model_id)
    exchange.send_json({"embedding": vector.tolist()})

