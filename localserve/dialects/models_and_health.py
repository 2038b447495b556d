"""Endpoints about the models: health, the model list, slots, and loading or unloading one.

GET /v1/models lists the whole catalogue with each model's state (loaded, loading,
unloaded), its settings, what its file says of it (`details`, read without loading it) and,
once loaded, what the engine reports (`meta`). POST
/models/load and /models/unload ({"model": NAME}) are for operators (under the API key).
"""

from __future__ import annotations

import time
from functools import partial
from typing import TYPE_CHECKING, Any

from ..errors import ApiError, shown
from ..models.adapter_files import ADAPTER_MARK, AdapterFile
from ..models.facts import facts_of
from ..models.states import LOADED
from ..models.units import describe_duration
from ..settings import Settings
from .exchange import Exchange, RouteTable
from .failures import refusals
from .fields import invalid
from .services import Services

if TYPE_CHECKING:
    from ..models.manager import ModelManager
    from ..models.record import Record
    from ..models.served import ServedModel

SHOWN_SETTINGS = ("ctx_size", "slots", "n_gpu_layers", "threads", "batch_size", "cache_ram", "chat_template_file",
                  "tool_syntax", "mmproj")


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/health", "GET", partial(health, services))
    table.add("/v1/health", "GET", partial(health, services))
    table.add("/v1/models", "GET", partial(list_models, services))
    table.add("/v1/models/{model}", "GET", partial(get_model, services))
    table.add("/slots", "GET", partial(slots, services))
    table.add("/models/load", "POST", partial(load, services))
    table.add("/models/unload", "POST", partial(unload, services))


def health(services: Services, exchange: Exchange) -> None:
    """{"status": "ok"} once the catalogue is read (as llama-server answers), plus the devices
    when layers live elsewhere (RPC workers, GPUs). ?model=NAME: ok only once NAME is loaded."""
    if not services.is_ready():
        exchange.send_json({"status": "loading"}, status=503)
        return
    models = services.ready()
    name = exchange.request.query.get("model")
    if name is not None:
        record = find_exact(models, name)
        state = record.state
        exchange.send_json({"status": "ok" if state == LOADED else state, "model": record.name, "state": state},
                           status=200 if state == LOADED else 503)
        return
    body: dict[str, Any] = {"status": "ok"}
    devices = [d for m in models.served_models() for d in m.chat.engine.devices]
    if any(d.kind != "cpu" for d in devices):
        body["devices"] = [device.as_json() for device in devices]   # as of each model's load
    exchange.send_json(body)


def find_exact(models: ModelManager, name: str) -> Record:
    record = models.exact(name)
    if record is None:
        raise ApiError(404, f"model '{shown(name)}' does not exist; this server serves {models.roster.names()}",
                       param="model", code="model_not_found")
    return record


def model_object(record: Record, created: int, server_settings: Settings) -> dict:
    loaded = record.served
    settings = loaded.settings if loaded is not None else record.entry.settings(server_settings)
    obj: dict[str, Any] = {
        "id": record.name,
        "object": "model",
        "created": int(loaded.loaded_at) if loaded is not None else created,
        "owned_by": "localserve",
        "source": record.entry.source,      # where it came from: configured, or which store found it
        "state": record.state,
        "aliases": list(record.entry.aliases),
        "keep_alive": describe_duration(record.keep_alive),
        "settings": {name: getattr(settings, name) for name in SHOWN_SETTINGS},
        # llama-server's router fields: Zed's llama.cpp provider reads the state and the images hint here
        "status": router_status(record),
        "architecture": {"input_modalities": ["text", "image"] if settings.mmproj else ["text"],
                         "output_modalities": ["text"]},
    }
    found = facts_of(record.entry, server_settings)
    if found is not None:       # what the file says of itself, loaded or not (models/facts.py)
        obj["details"] = {"architecture": found.architecture, "n_params": found.n_params,
                          "parameter_size": found.parameter_size, "quantization": found.quantization,
                          "n_ctx_train": found.n_ctx_train, "capabilities": list(found.capabilities)}
    if record.entry.origin:
        obj["origin"] = record.entry.origin
    if loaded is not None:
        obj["meta"] = meta(loaded)
        obj["memory"] = {"estimated_bytes": loaded.estimated_bytes, "measured_bytes": loaded.measured_bytes}
    if record.last_error and record.served is None:
        obj["error"] = record.last_error
    return obj


def router_status(record: Record) -> dict:
    """A model's state as llama-server's router reports it (`failed` and `exit_code` after a
    load that failed: a process's exit status there, 1 here)."""
    status: dict[str, Any] = {"value": record.state, "args": []}
    if record.last_error and record.served is None:
        status.update(failed=True, exit_code=1)
    return status


def meta(model: ServedModel) -> dict:
    engine, settings = model.chat.engine, model.settings     # the facade: facts read once at load
    info = engine.info
    return {
        "n_ctx": engine.n_ctx,
        "n_ctx_train": info.n_ctx_train,
        "n_params": info.n_params,
        "n_vocab": info.n_vocab,
        "eog_tokens": engine.eog_tokens,
        "size": info.size,
        "architecture": info.architecture,
        "description": info.description,
        "chat_template_source": model.chat.template.source,
        "tool_syntax": model.chat.tool_syntax,
        "chat_template_caps": model.chat.template.caps.as_json(),   # what the template shows, probed at load
        "n_gpu_layers": settings.n_gpu_layers,
        "n_layer": engine.n_layer,
        "gpu_layers_offloaded": engine.gpu_layers,
        "slots": settings.slots,
        "devices": [device.as_json() for device in engine.devices],
        "cpu_weights": engine.weight_plan.mode,
        "weight_buffers_mib": engine.weight_buffers,       # {"CPU_REPACK": 52.5, "CPU": 182.7}
        "vision": engine.has_vision,                         # a projector is loaded: it reads images
        "audio": engine.has_audio,                           # its projector has an audio encoder: it hears clips
        "mmproj": settings.mmproj if engine.has_vision or engine.has_audio else None,
    }


def anthropic_model_object(record: Record, created: int) -> dict:
    """The same model as Anthropic's Models API describes one (clients send anthropic-version)."""
    loaded = record.served
    when = int(loaded.loaded_at) if loaded is not None else created
    obj: dict[str, Any] = {"type": "model", "id": record.name, "display_name": record.name,
                           "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
                           "lifecycle": "active", "state": record.state}
    if loaded is not None:
        obj["max_input_tokens"] = loaded.chat.engine.n_ctx
    return obj


def wants_anthropic(exchange: Exchange) -> bool:
    return exchange.request.header("anthropic-version") is not None


def _describe(services: Services, exchange: Exchange, record: Record) -> dict:
    if wants_anthropic(exchange):
        return anthropic_model_object(record, services.created)
    return model_object(record, services.created, services.settings)


def _with_adapters(services: Services, exchange: Exchange, record: Record) -> list[dict]:
    """The model, then each of its LoRA adapters as a model of its own (`base+adapter`, as vLLM
    lists them: `parent` the base model, `root` the adapter's file)."""
    base = _describe(services, exchange, record)
    return [base] + [adapter_object(base, record, adapter) for adapter in record.entry.adapter_files()]


def adapter_object(base: dict, record: Record, adapter: AdapterFile) -> dict:
    name = f"{record.name}{ADAPTER_MARK}{adapter.name}"
    if "display_name" in base:      # Anthropic's shape
        return {**base, "id": name, "display_name": name}
    return {**base, "id": name, "aliases": [], "parent": record.name, "root": adapter.path}


def list_models(services: Services, exchange: Exchange) -> None:
    models = [obj for record in services.ready().all_models() for obj in _with_adapters(services, exchange, record)]
    if wants_anthropic(exchange):
        exchange.send_json({"data": models, "has_more": False, "first_id": models[0]["id"],
                            "last_id": models[-1]["id"]})
        return
    exchange.send_json({"object": "list", "data": models})


def get_model(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    name = exchange.params["model"]
    record = find_exact(models, name)
    adapter = models.catalogue.adapter_named(name)
    if adapter is None:
        exchange.send_json(_describe(services, exchange, record))
        return
    chosen = next(f for f in record.entry.adapter_files() if f.name == adapter)
    exchange.send_json(adapter_object(_describe(services, exchange, record), record, chosen))


def slots(services: Services, exchange: Exchange) -> None:
    """Every loaded model's slots and parked jobs, each marked with its model; the queue and RAM
    cache summed, and model by model under "models"."""
    per_model = {m.name: m.slot_state() for m in services.ready().served_models()}
    caches = [state["ram_cache"] for state in per_model.values()]
    exchange.send_json({
        "slots": [{**slot, "model": name} for name, state in per_model.items() for slot in state["slots"]],
        "parked": [{**job, "model": name} for name, state in per_model.items() for job in state["parked"]],
        "queue_depth": sum(state["queue_depth"] for state in per_model.values()),
        "parks": sum(state["parks"] for state in per_model.values()),
        "resumes": sum(state["resumes"] for state in per_model.values()),
        "ram_cache": {key: sum(cache[key] for cache in caches)
                      for key in ("entries", "bytes", "limit_bytes", "hits")},
        "threads": sum(state["threads"]["in_use"] for state in per_model.values()),   # decoding now, all models
        "models": per_model,
    })


def _model_name(exchange: Exchange) -> str:
    body = exchange.json()
    name = body.get("model")
    if not isinstance(name, str) or not name:
        raise invalid("model", "expected the name of a model in the catalogue")
    return name


def load(services: Services, exchange: Exchange) -> None:
    """POST /models/load {"model": NAME}: answers once the model is loaded (or its load failed)."""
    models = services.ready()
    name = _model_name(exchange)
    find_exact(models, name)
    with refusals():
        model = models.load(name)
    exchange.send_json({"model": model.name, "state": LOADED, "load_seconds": round(model.load_seconds, 3)})


def unload(services: Services, exchange: Exchange) -> None:
    """POST /models/unload {"model": NAME}: answers once it is unloaded; a model in use is
    unloaded when its requests end (a bounded wait, then 503)."""
    models = services.ready()
    name = _model_name(exchange)
    if services.pulls.stop(name):       # a POST /models download: stopped (llamacpp/downloads.py)
        exchange.send_json({"success": True})
        return
    record = find_exact(models, name)
    with refusals():
        state = models.unload(record.name)
    exchange.send_json({"model": record.name, "state": state})
