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
from ..services import Services
from .names import catalogue_name, requested_name

NDJSON = "application/x-ndjson"
LOCAL_ONLY = "this server (localserve) serves its local model catalogue only and never downloads or writes models"


def pull(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    body = exchange.json()
    name = requested_name(body)
    if models.catalogue.exact(name) is None:
        raise ApiError(404, f"model '{shown(name)}' is not in the catalogue; {LOCAL_ONLY} "
                            f"(it serves {', '.join(models.catalogue.names())})", code="model_not_found")
    statuses = [{"status": "pulling manifest"}, {"status": "success"}]
    if read_bool(body, "stream", default=True):
        exchange.writer.send(200, b"".join(orjson.dumps(s) + b"\n" for s in statuses), content_type=NDJSON)
    else:
        exchange.send_json(statuses[-1])


def refused(action: str, services: Services, exchange: Exchange) -> None:
    """A write or a download (`action`: push, create, copy): this server does neither."""
    services.ready()
    raise ApiError(400, f"{action} is not available: {LOCAL_ONLY}", code="not_supported")


def delete(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    name = requested_name(exchange.json())
    catalogue_name(models, name)        # Ollama's 404 for a name not there
    raise ApiError(400, f"model '{shown(name)}' was not deleted: {LOCAL_ONLY}; remove it from the "
                        f"configuration instead", code="not_supported")
