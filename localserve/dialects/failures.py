"""The runtime's reasons to refuse or fail a job (generation.py), and the models' reasons to
refuse a request (models/errors.py), as the answers clients get.

The runtime speaks no HTTP: it raises QueueFull at submit, or ends a job with
Finished(error=SamplingTooSlow(...)); building a prompt raises ContextOverflow or
PromptRefused; the model manager raises UnknownModel, ModelBusy and the like. Here each reason
gets its HTTP status, its API code, the message where the runtime gave none, and when to
retry. Every dialect agrees on these;
the route's ErrorShape then renders the ApiError in the dialect's own shape (Anthropic's
503 is its 529 overloaded), whole or in-band.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from ..errors import ApiError, context_exceeded
from ..generation import (ContextOverflow, EmbeddingsUnavailable, PromptRefused, GenerationFailure, GrammarBacklog, InvalidGrammar, JobCancelled,
                          NoAllowedToken, QueueFull, RuntimeStopped, SamplingTooSlow)
from ..models.errors import BadModelRequest, ModelBusy, ModelError, ModelLoadFailed, ModelTooLarge, UnknownModel
from ..settings import RETRY_AFTER_SECONDS

GRAMMAR_RETRY_AFTER_SECONDS = 30   # Retry-After on 503 while abandoned grammar samples still run
MODEL_RETRY_AFTER_SECONDS = 5      # Retry-After on the 503 of a load that waited --evict-wait for a busy model


@dataclass(frozen=True)
class Answer:
    status: int
    code: str
    message: str = ""                   # when the failure carries none
    retry_after: int | None = None


ANSWERS: dict[type[GenerationFailure], Answer] = {
    QueueFull: Answer(503, "server_overloaded", "the server is busy: too many requests are queued; retry shortly",
                      RETRY_AFTER_SECONDS),
    RuntimeStopped: Answer(503, "server_shutting_down", "the server is shutting down"),
    GrammarBacklog: Answer(503, "server_overloaded", "the server is still finishing grammar work that went over "
                                                     "the time limit; retry a request with a grammar or schema later",
                           GRAMMAR_RETRY_AFTER_SECONDS),
    InvalidGrammar: Answer(400, "invalid_grammar"),
    SamplingTooSlow: Answer(400, "sampling_too_slow"),
    NoAllowedToken: Answer(400, "no_allowed_token"),
    EmbeddingsUnavailable: Answer(503, "embeddings_unavailable"),
    JobCancelled: Answer(499, "cancelled"),
    GenerationFailure: Answer(500, "server_error", "internal error in the runtime"),
}


def api_error(failure: GenerationFailure) -> ApiError:
    if isinstance(failure, ContextOverflow):
        return context_overflow(failure)
    if isinstance(failure, PromptRefused):
        return ApiError(400, failure.message, code=failure.code, param=failure.param)
    answer = next(ANSWERS[kind] for kind in type(failure).__mro__ if kind in ANSWERS)
    headers = [("Retry-After", str(answer.retry_after))] if answer.retry_after is not None else None
    return ApiError(answer.status, failure.message or answer.message, code=answer.code, headers=headers)


@contextlib.contextmanager
def refusals():
    """Around asking the runtime (submit) or the model manager (find, use, load, unload): their
    reasons to refuse, as the answers clients get."""
    try:
        yield
    except GenerationFailure as failure:
        raise api_error(failure) from None
    except ModelError as refusal:
        raise model_error(refusal) from None


def context_overflow(failure: ContextOverflow, param: str = "messages") -> ApiError:
    """400 context_length_exceeded, naming the sizes (n_prompt_tokens, n_ctx) and the request's
    field that holds the prompt (`param`: the dialect's own)."""
    error = context_exceeded(failure.n_prompt_tokens, failure.n_ctx, at_least=failure.at_least)
    error.param = param
    return error


@contextlib.contextmanager
def prompt_refusals(param: str = "messages"):
    """Around building a prompt: a prompt the context cannot hold (its field named `param`), or
    one that cannot be built from what the client sent, as the answer clients get."""
    try:
        yield
    except ContextOverflow as failure:
        raise context_overflow(failure, param) from None
    except PromptRefused as failure:
        raise api_error(failure) from None


MODEL_STATUS: dict[type[ModelError], int] = {
    BadModelRequest: 400,
    UnknownModel: 404,
    ModelBusy: 503,
    ModelTooLarge: 503,
    ModelLoadFailed: 500,
    ModelError: 500,
}


def model_error(refusal: ModelError) -> ApiError:
    """The models' refusal (its code and field its own) with its HTTP status; a busy model's
    answer says when to ask again."""
    status = next(MODEL_STATUS[kind] for kind in type(refusal).__mro__ if kind in MODEL_STATUS)
    headers = [("Retry-After", str(MODEL_RETRY_AFTER_SECONDS))] if isinstance(refusal, ModelBusy) else None
    return ApiError(status, refusal.message, code=refusal.code, param=refusal.param, headers=headers)
