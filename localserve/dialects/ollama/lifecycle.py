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
from ..failures import refusals
from ..services import Services
from .names import catalogue_name, requested_name, serve_with_ollama_model
from .replies import NDJSON, Answer


def load_or_unload(services: Services, exchange: Exchange, body: dict, answer: Answer, stream: bool) -> None:
    def send(reason: str) -> None:
        if stream:
            exchange.writer.send(200, orjson.dumps(answer.empty(reason)) + b"\n", content_type=NDJSON)
        else:
            exchange.send_json(answer.empty(reason))

    models = services.ready()
    if unloads(body):
        with refusals():
            record = models.find(catalogue_name(models, requested_name(body)))
            models.unload(record.name)
        send("unload")
        return
    serve_with_ollama_model(exchange, models, body, lambda model: send("load"))


def unloads(body: dict) -> bool:
    value = body.get("keep_alive")
    if value is None:
        return False
    try:
        return parse_duration(value) == 0
    except ValueError as exc:
        raise ApiError(400, f"invalid 'keep_alive': {exc}", param="keep_alive") from None
