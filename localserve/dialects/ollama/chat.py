"""POST /api/chat: Ollama's chat, streamed as NDJSON (the default) or whole; a history too long
for the context loses its oldest turns unless `truncate` is false (truncation.py). `shift` is
read and has nothing to change: this server never shifts a context, so an answer that reaches
the context's end stops there (`done_reason: "length"`), as Ollama's does with `shift: false`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from ...conversation import Message
from ...errors import ApiError
from ...generation import GenerationRequest
from ...prompt.build import build_chat_request
from ..exchange import Exchange
from ..failures import prompt_refusals
from ..fields import read_bool
from ..request_cycle import Reply, serve_generation
from ..services import Services
from .lifecycle import load_or_unload
from .messages import read_chat, read_messages
from .names import catalogue_name, requested_name
from .options import Options, read_options, read_stream, read_think, renamed
from .replies import Answer, NdjsonLines
from .truncation import newest_that_fit

if TYPE_CHECKING:
    from ...models.served import ServedModel


def handle(services: Services, exchange: Exchange) -> None:
    services.ready()
    body = exchange.json()
    answer = Answer(requested_name(body), chat=True)
    think, level = read_think(body)
    if not body.get("messages"):
        if body.get("messages") not in (None, []):
            read_messages(body["messages"])      # the 400 for a messages that is not an array
        load_or_unload(services, exchange, body, answer, read_stream(body))
        return
    chat = read_chat(body, think, level, read_messages(body["messages"]))
    truncate = read_bool(body, "truncate", default=True)
    read_bool(body, "shift", default=True)      # no context shift here: an answer stops at the context's end
    label = f"ollama chat {exchange.request_id}"

    def build(model: ServedModel, options: Options) -> GenerationRequest:
        def attempt(messages: list[Message]) -> GenerationRequest:
            trial = dataclasses.replace(chat, messages=messages)
            return build_chat_request(model.chat, trial, dataclasses.replace(options.sampling),
                                      max_tokens=options.max_tokens, stop=options.stop, label=label)
        return newest_that_fit(chat.messages, attempt, truncate, exchange.raise_if_gone, label)

    serve_ollama(services, exchange, answer, label, build, "messages")


def serve_ollama(services: Services, exchange: Exchange, answer: Answer, label: str,
                 build: Callable[[ServedModel, Options], GenerationRequest], prompt_param: str) -> None:
    """/api/chat's and /api/generate's turn in the one request cycle: build(model, options) makes
    the job once the model is there (a prompt too long for the context is a 400 naming
    `prompt_param`); the answer is NDJSON lines or one object. A model's load is
    silence on an NDJSON stream (it has no comment line)."""
    body = exchange.json()
    models = services.ready()
    body["model"] = catalogue_name(models, requested_name(body))    # the older `name` too: the cycle reads `model`

    def read(model: ServedModel, body: dict) -> Reply:
        answer.model_ready()
        options = read_options(body, model.chat.engine.n_vocab, label)
        with format_named(), prompt_refusals(prompt_param):
            request = build(model, options)
        return Reply(request, shape=lambda gen: NdjsonLines(answer), whole=answer.whole)

    serve_generation(exchange, services, read, streams=read_stream, shape_type=NdjsonLines)


@contextmanager
def format_named() -> Iterator[None]:
    """A structured-output error named as Ollama's clients set it: `format`."""
    try:
        yield
    except ApiError as exc:
        raise renamed(exc, "format") if exc.param == "response_format" else exc from None
