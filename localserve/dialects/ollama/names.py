"""Ollama's model names (`name:tag`) and the one place this dialect gets its model.

Ollama's clients send `qwen3:8b` or `llama3.2:latest`, and a name without a tag means
`:latest`. A catalogue name `x` answers as `x` and `x:latest`; an alias may carry its own tag
(`[models.NAME] aliases = ["qwen3:8b"]`). Lists show each catalogue name with its tag
(`x:latest`), as Ollama lists its models.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ...errors import ApiError, shown
from ...models.adapter_files import ADAPTER_MARK
from ...models.catalogue import LATEST_TAG
from ..exchange import Exchange
from ..loading import serve_with_model

if TYPE_CHECKING:        # the models themselves: importing them would load llama.cpp on a connection thread
    from ...models.served import ServedModel
    from ...models.manager import ModelManager

def tagged(name: str) -> str:
    """The name as Ollama lists it: with a tag."""
    return name if ":" in name else name + LATEST_TAG


def catalogue_name(models: ModelManager, name: str) -> str:
    """The catalogue's own name for an Ollama name (the catalogue answers `x:latest` for `x`);
    a name the catalogue has not is Ollama's 404, even on a one-model server (whose OpenAI and
    Anthropic routes answer any name): Ollama's clients offer to pull a model that is not found."""
    entry = models.catalogue.exact(name)
    if entry is None:
        raise not_found(name)
    adapter = models.catalogue.adapter_named(name)      # base+adapter: the base running that adapter
    return entry.name if adapter is None else f"{entry.name}{ADAPTER_MARK}{adapter}"


def not_found(name: str) -> ApiError:
    """Ollama's own words for it (server/routes.go), which its clients match."""
    return ApiError(404, f"model '{shown(name)}' not found", param="model", code="model_not_found")


def requested_name(body: dict, field: str = "model") -> str:
    """The request's model name: `model`, or the older `name` Ollama still takes."""
    name = body.get(field)
    if name is None and field == "model":
        name = body.get("name")
    if not isinstance(name, str) or not name:
        raise ApiError(400, f"{field} is required: the name of a model (GET /api/tags lists them)",
                       param=field, code="missing_model")
    return name


def model_request(models: ModelManager, body: dict) -> dict:
    """The model the request names, as the catalogue names it, its keep_alive and its options
    (num_ctx: the context it needs)."""
    return {"model": catalogue_name(models, requested_name(body)), "keep_alive": body.get("keep_alive"),
            "options": body.get("options")}


def serve_with_ollama_model(exchange: Exchange, models: ModelManager, body: dict,
                            serve: Callable[[ServedModel], None]) -> None:
    """serve(model) with the model the body names, loaded and held. A load renders nothing:
    NDJSON has no comment a client would skip, so the client waits in silence (the socket is
    still watched)."""
    serve_with_model(exchange, models, model_request(models, body), serve)
