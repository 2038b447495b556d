"""What /v1/embeddings and /v1/rerank share: the model a request names, its inputs as checked
token sequences, and running them as one job while the client waits.

- model_for: the model a request names, through the catalogue (loading.use_model), as the
  chat endpoints reach theirs; what of it an embedding needs.
- fit: an input longer than the embedding context is a 400 naming its index, or is cut.
- run: submit the job, wait for its vectors, peek at the socket every
  DISCONNECT_POLL_INTERVAL; a client that left cancels the job's remaining batches.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from ..engine.embedding_spec import EmbeddingSpec
from ..engine.facade import EngineFacade
from ..errors import ApiError, ClientGone
from ..runtime.embedding_jobs import EmbeddingJob
from ..settings import DISCONNECT_POLL_INTERVAL
from .exchange import Exchange
from .fields import invalid
from .loading import LoadWait, use_model
from .services import Services
from .failures import api_error, refusals


@dataclass
class EmbeddingModel:
    model_id: str
    engine: EngineFacade
    submit: Callable[[EmbeddingJob], EmbeddingJob]      # to the model's runtime (ServedModel.submit_embedding)
    spec: EmbeddingSpec
    max_inputs: int                 # --max-embedding-inputs


@contextlib.contextmanager
def model_for(exchange: Exchange, services: Services, body: dict) -> Iterator[EmbeddingModel]:
    """The model the body's `model` names (404 otherwise), loaded and held while the request runs,
    as the chat endpoints hold theirs."""
    with use_model(services.ready(), body, LoadWait(exchange)) as loaded:
        yield EmbeddingModel(loaded.model_id, loaded.chat.engine, loaded.submit_embedding, loaded.embedding_spec,
                             loaded.settings.max_embedding_inputs)


def context_exceeded(param: str, index: int, n_tokens: int, limit: int) -> ApiError:
    return ApiError(400, f"{param}[{index}] has {n_tokens} tokens but an input may have at most {limit} "
                         f"(the embedding context: the smaller of the context and --batch-size); "
                         f"send \"truncate\": true to cut it", param=param, code="context_length_exceeded",
                    extra={"index": index, "n_prompt_tokens": n_tokens, "n_ctx": limit})


def fit(model: EmbeddingModel, tokens: list[int], param: str, index: int, truncate: bool,
        keeps_last: bool = False) -> list[int]:
    """The tokens, or a 400 when there are more than one input may have; with truncate, cut
    to fit (keeps_last: the last token is an end token the tokenizer added, and stays)."""
    limit = model.spec.max_tokens
    if len(tokens) <= limit:
        return tokens
    if not truncate:
        raise context_exceeded(param, index, len(tokens), limit)
    if keeps_last and limit > 1:
        return tokens[:limit - 1] + tokens[-1:]
    return tokens[:limit]


def check_tokens(model: EmbeddingModel, tokens: list, param: str) -> list[int]:
    if not tokens:
        raise invalid(param, "an input is empty; give at least one character or token")
    for token in tokens:
        if not isinstance(token, int) or isinstance(token, bool):
            raise invalid(param, "expected token ids (integers)")
        if not model.engine.valid_token(token):
            raise invalid(param, f"token id {token} is outside the vocabulary")
    return tokens


def run(exchange: Exchange, model: EmbeddingModel, inputs: list[list[int]]) -> list[Any]:
    """The vectors of every input (rank: the scores), in input order."""
    job = EmbeddingJob(inputs, label=f"{exchange.request.path} {exchange.request_id}")
    with refusals():
        model.submit(job)
    try:
        while not job.done.wait(DISCONNECT_POLL_INTERVAL):
            if exchange.writer.peer_closed():
                raise ClientGone("peer closed")
    except BaseException:
        job.cancel()
        raise
    if job.error is not None:
        raise api_error(job.error)
    return job.vectors
