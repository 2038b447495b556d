"""llama-server's POST /models {"model": "org/repo[:quant]"}: a download from the Hugging Face
Hub (or $HF_ENDPOINT) started in the background, after the repo and its files are checked
(llama-server validates by fetching the metadata first); `{"success": true}` at once. Its
progress is on GET /models/sse (models.py): `download_progress` events
`{"model", "event", "data": {URL: {"done", "total"}}}`, then `download_finished` or
`download_failed`; the model is in GET /models from then. POST /models/unload of a model still
downloading stops it (the partial file kept for the next pull). A repo's bare name that a quant
already served holds asks the Hub for its default quant all the same (pulls.asks_for_the_default)."""

from __future__ import annotations

from functools import partial

from ...errors import ApiError, shown
from ..exchange import Exchange, RouteTable
from ..pulls import asks_for_the_default, prepare
from ..services import Services
from .errors import LLAMA_ERRORS


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/models", "POST", partial(download, services), errors=LLAMA_ERRORS)


def download(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    name = exchange.json().get("model")
    if not isinstance(name, str) or not name:
        raise ApiError(400, "model must be a non-empty string", param="model")
    served = models.catalogue.exact(name)
    if served is not None and not asks_for_the_default(name, served):
        raise ApiError(400, f"model '{shown(name)}' already exists", param="model")
    prepared = prepare(name)
    if models.catalogue.exact(prepared.model_name) is not None:
        raise ApiError(400, f"model '{shown(name)}' already exists (as '{prepared.model_name}')", param="model")
    services.pulls.start(name, prepared, models)
    exchange.send_json({"success": True})
