"""llama-server's GET /lora-adapters and POST /lora-adapters: a model's LoRA adapters and their
global scales (models/adapters.py has the rules).

GET lists `[{"id", "path", "scale", "task_name", "prompt_prefix"}]` (and ours: `name`, the
adapter's model name being `base+name`, and `error` for one llama.cpp refused); POST takes
`[{"id", "scale"}]`, sets those scales and 0 for every adapter not listed, and answers
`{"success": true}`. Requests that list no adapters of their own run under these scales from
then on; jobs already queued keep theirs. The model is `?model=`'s, else the one served.
"""

from __future__ import annotations

from functools import partial

from ...errors import ApiError
from ..exchange import Exchange, RouteTable
from ..failures import refusals
from ..fields import read_adapter_scales
from ..loading import LoadWait, use_model
from ..services import Services
from .errors import LLAMA_ERRORS
from .model_choice import named_model


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/lora-adapters", "GET", partial(list_adapters, services), errors=LLAMA_ERRORS)
    table.add("/lora-adapters", "POST", partial(set_scales, services), errors=LLAMA_ERRORS)


def list_adapters(services: Services, exchange: Exchange) -> None:
    name = named_model(services, exchange.request.query, "/lora-adapters")
    with use_model(services.ready(), {"model": name}, LoadWait(exchange)) as model:
        exchange.send_json(model.adapters.as_json() if model.adapters is not None else [])


def set_scales(services: Services, exchange: Exchange) -> None:
    pairs = read_adapter_scales(exchange.json(array=True))
    name = named_model(services, exchange.request.query, "/lora-adapters")
    with use_model(services.ready(), {"model": name}, LoadWait(exchange)) as model:
        if model.adapters is None:
            if any(scale != 0.0 for _, scale in pairs):
                raise ApiError(400, f"model '{model.name}' has no LoRA adapters", param="lora",
                               code="invalid_lora")
        else:
            with refusals():
                model.adapters.set_scales(pairs)
    exchange.send_json({"success": True})
