"""POST /api/pull, /api/push, /api/create, /api/copy and DELETE /api/delete.

This daemon serves its local catalogue (--model, --models-dir, [models.NAME]) and never
fetches or writes models. A pull of a model the catalogue has succeeds at once (streamed as
Ollama streams its progress, unless `stream` is false), so clients that pull before they chat
work unchanged; everything that would need the network or write a model is a clear 400.
"""

from __future__ import annotations

import orjson

from ...errors import ApiError, shown
from ..exchange import Exchange
from ..fields import read_bool
from .names import catalogue_name, requested_name

NDJSON = "application/x-ndjson"
LOCAL_ONLY = "this server (localserve) serves its local model catalogue only and never downloads or writes models"


def pull(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    body = exchange.json()
    name = requested_name(body)
    if app.models.catalogue.exact(catalogue_name(app, name)) is None:
        raise ApiError(404, f"model '{shown(name)}' is not in the catalogue; {LOCAL_ONLY} "
                            f"(it serves {', '.join(app.models.catalogue.names())})", code="model_not_found")
    statuses = [{"status": "pulling manifest"}, {"status": "success"}]
    if read_bool(body, "stream", default=True):
        exchange.writer.send(200, b"".join(orjson.dumps(s) + b"\n" for s in statuses), content_type=NDJSON)
    else:
        exchange.send_json(statuses[-1])


def refused(action: str):
    def handler(exchange: Exchange) -> None:
        exchange.app.require_ready()
        raise ApiError(400, f"{action} is not available: {LOCAL_ONLY}", code="not_supported")
    return handler


def delete(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    name = requested_name(exchange.json())
    if app.models.catalogue.exact(catalogue_name(app, name)) is None:
        raise ApiError(404, f"model '{shown(name)}' not found", code="model_not_found")
    raise ApiError(400, f"model '{shown(name)}' was not deleted: {LOCAL_ONLY}; remove it from the "
                        f"configuration instead", code="not_supported")
