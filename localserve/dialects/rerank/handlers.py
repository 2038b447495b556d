"""POST /v1/rerank (and /rerank): score documents against a query with a ranking model.

Request: {"model", "query", "documents": [str | {"text"}], "top_n", "return_documents",
"truncate"}; answer: {"object": "list", "model", "results": [{"index", "relevance_score",
"document": {"text"}?}], "usage"}, sorted by score, best first: the shape Jina's and Cohere's
clients read, and llama-server answers. The score is the ranking head's output as llama.cpp
gives it (a logit for BERT-style rerankers), as llama-server reports it.

Each (query, document) pair is one input: the GGUF's "rerank" template with {query} and
{document} filled in when it has one (Qwen3-Reranker style), else the tokens the vocabulary
puts around a text pair (embed.pair_tokens).
"""

from __future__ import annotations

from typing import Any

from ...engine.embedding_spec import pair_tokens
from ...engine.facade import TooManyTokens
from ..embedding_runs import EmbeddingModel, context_exceeded, model_for, run
from ..exchange import Exchange
from ..fields import invalid, kind_of, read_bool, read_int
from ..services import Services


def handle(services: Services, exchange: Exchange) -> None:
    body = exchange.json()
    with model_for(exchange, services, body) as model:
        if not model.spec.ranks:
            raise invalid("model", f"'{model.model_id}' has no ranking head (its pooling is {model.spec.pooling}); "
                                   f"/v1/rerank needs a reranker such as bge-reranker or Qwen3-Reranker")
        query = body.get("query")
        if not isinstance(query, str) or not query:
            raise invalid("query", "expected a non-empty string")
        documents = read_documents(body, model.max_inputs)
        top_n = read_int(body, "top_n", low=1, default=len(documents))
        return_documents = read_bool(body, "return_documents")
        truncate = read_bool(body, "truncate")
        query_tokens = tokenize_query(model, query)
        inputs = [pair(model, query, query_tokens, doc, i, truncate) for i, doc in enumerate(documents)]
        scores = run(exchange, model, inputs)
    n_tokens = sum(len(tokens) for tokens in inputs)
    services.metrics.record_embedding("rerank", len(inputs), n_tokens, model.model_id)
    order = sorted(range(len(documents)), key=lambda i: -float(scores[i][0]))[:top_n]
    results: list[dict[str, Any]] = []
    for i in order:
        result: dict[str, Any] = {"index": i, "relevance_score": float(scores[i][0])}
        if return_documents:
            result["document"] = {"text": documents[i]}
        results.append(result)
    exchange.send_json({"object": "list", "model": model.model_id, "results": results,
                        "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}})


def read_documents(body: dict, max_inputs: int) -> list[str]:
    value = body.get("documents")
    if not isinstance(value, list):
        raise invalid("documents", f"expected an array of strings or {{\"text\"}} objects, got {kind_of(value)}")
    if not value:
        raise invalid("documents", "is an empty array; give at least one document")
    if len(value) > max_inputs:
        raise invalid("documents", f"has {len(value)} documents; at most {max_inputs} are taken in one call "
                                   f"(--max-embedding-inputs)")
    texts = []
    for i, doc in enumerate(value):
        text = doc.get("text") if isinstance(doc, dict) else doc
        if not isinstance(text, str) or not text:
            raise invalid("documents", f"documents[{i}] must be a non-empty string or an object with a "
                                       f"non-empty \"text\"")
        texts.append(text)
    return texts


def tokenize_query(model: EmbeddingModel, query: str) -> list[int]:
    limit = model.spec.max_tokens
    try:
        return model.engine.tokenize(query, add_special=False, parse_special=False, limit=limit)
    except TooManyTokens as exc:
        raise invalid("query", f"has at least {exc.at_least} tokens; a pair may have at most {limit}") from None


def pair(model: EmbeddingModel, query: str, query_tokens: list[int], document: str, index: int,
         truncate: bool) -> list[int]:
    """The tokens of one (query, document) pair; with truncate, the document is cut to fit."""
    limit, engine = model.spec.max_tokens, model.engine
    if truncate:        # only as much of a huge text as can matter is tokenized
        document = document[:(limit + 1) * engine.max_piece_bytes]
    try:
        doc = engine.tokenize(document, add_special=False, parse_special=False, limit=None if truncate else limit)
    except TooManyTokens as exc:
        raise context_exceeded("documents", index, exc.at_least, limit) from None
    tokens = build(model, query, query_tokens, doc)
    if len(tokens) <= limit:
        return tokens
    if not truncate:
        raise context_exceeded("documents", index, len(tokens), limit)
    room = len(doc) - (len(tokens) - limit)
    if room < 1:
        raise invalid("query", f"the query alone takes {len(tokens) - len(doc)} of the {limit} tokens an input "
                               f"may have; no document fits beside it")
    return build(model, query, query_tokens, doc[:room])[:limit]


def build(model: EmbeddingModel, query: str, query_tokens: list[int], doc: list[int]) -> list[int]:
    template = model.spec.rerank_template
    engine = model.engine
    if template is not None:
        text = template.replace("{query}", query).replace("{document}", engine.detokenize(doc))
        return engine.tokenize(text, add_special=True, parse_special=True)
    return pair_tokens(model.spec, query_tokens, doc)
