"""A generating request with nothing to generate: Ollama's way to load or unload a model.

`/api/chat` with no messages, or `/api/generate` with no prompt, loads the model and answers
`done_reason: "load"`; with `keep_alive: 0` it unloads it instead (`"unload"`). Asked as a
stream, the answer is that stream's one (and last) NDJSON line.
"""

from __future__ import annotations

import orjson

from ...errors import ApiError
from ...models.units import parse_duration
from ..exchange import Exchange
from .names import catalogue_name, requested_name, serve_with_ollama_model
from .replies import NDJSON, Reply


def load_or_unload(exchange: Exchange, body: dict, reply: Reply, stream: bool) -> None:
    def answer(reason: str) -> None:
        if stream:
            exchange.writer.send(200, orjson.dumps(reply.empty(reason)) + b"\n", content_type=NDJSON)
        else:
            exchange.send_json(reply.empty(reason))

    if unloads(body):
        app = exchange.app
        record = app.models.find(catalogue_name(app, requested_name(body)))
        app.models.unload(record.name)
        answer("unload")
        return
    serve_with_ollama_model(exchange, body, lambda model: answer("load"))


def unloads(body: dict) -> bool:
    value = body.get("keep_alive")
    if value is None:
        return False
    try:
        return parse_duration(value) == 0
    except ValueError as exc:
        raise ApiError(400, f"invalid 'keep_alive': {exc}", param="keep_alive") from None
