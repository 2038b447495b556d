"""A generating request with nothing to generate: Ollama's way to load or unload a model.

`/api/chat` with no messages, or `/api/generate` with no prompt, loads the model and answers
`done_reason: "load"`; with `keep_alive: 0` it unloads it instead (`"unload"`).
"""

from __future__ import annotations

from ...errors import ApiError
from ...models.units import parse_duration
from ..exchange import Exchange
from .names import catalogue_name, requested_name, serve_with_ollama_model
from .replies import Reply


def load_or_unload(exchange: Exchange, body: dict, reply: Reply) -> None:
    if unloads(body):
        app = exchange.app
        record = app.models.find(catalogue_name(app, requested_name(body)))
        app.models.unload(record.name)
        exchange.send_json(reply.empty("unload"))
        return

    def loaded(model) -> None:
        exchange.send_json(reply.empty("load"))

    serve_with_ollama_model(exchange, body, loaded)


def unloads(body: dict) -> bool:
    value = body.get("keep_alive")
    if value is None:
        return False
    try:
        return parse_duration(value) == 0
    except ValueError as exc:
        raise ApiError(400, f"invalid 'keep_alive': {exc}", param="keep_alive") from None
