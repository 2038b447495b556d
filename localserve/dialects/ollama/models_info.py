"""GET /api/tags, POST /api/show, GET /api/ps: the catalogue as Ollama describes its models.

A model's `details`, `model_info`, `capabilities` and template come from its file, read
without loading it (models/facts.py: the GGUF header, the chat template probed as a load
probes it): /api/show never loads, so Copilot Chat, which asks it of every model it lists,
evicts nothing under --max-models. The context a loaded model serves (ps, and show's
`parameters`) is the loaded model's own; an unloaded one's is what its load would give.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

import orjson

from ...errors import ApiError
from ...models.adapter_files import ADAPTER_MARK
from ...models.facts import ModelFacts, facts_of
from ...settings import Settings
from ..exchange import Exchange
from ..failures import refusals
from ..services import Services
from .clock import expires_at, timestamp
from .names import catalogue_name, requested_name, tagged

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.record import Record

PARAMETER_NAME_WIDTH = 30       # Ollama's `parameters` text: each name padded to this, then its value


def list_tags(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    exchange.send_json({"models": [entry for record in models.all_models()
                                   for entry in with_adapters(tag_entry(record, services.settings), record)]})


def with_adapters(entry: dict, record: Record) -> list[dict]:
    """The model's entry, then one per LoRA adapter: `base+adapter` runs the base with it."""
    names = [tagged(f"{record.name}{ADAPTER_MARK}{adapter.name}") for adapter in record.entry.adapter_files()]
    return [entry] + [{**entry, "name": name, "model": name} for name in names]


def list_running(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    running = []
    for record in models.all_models():
        model = record.served
        if model is None:
            continue
        size = model.memory_bytes
        engine = model.chat.engine
        on_gpu = engine.gpu_layers / engine.n_layer if engine.n_layer else 0.0
        running.append({"name": tagged(record.name), "model": tagged(record.name), "size": size,
                        "digest": digest(record.entry.path), "details": details(facts(record, services.settings)),
                        "expires_at": expires_at(record.expires), "size_vram": int(size * min(on_gpu, 1.0)),
                        "context_length": engine.n_ctx})
    exchange.send_json({"models": running})


def show(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    with refusals():
        record = models.find(catalogue_name(models, requested_name(exchange.json())))
    exchange.send_json(show_body(record, facts(record, services.settings)))


def facts(record: Record, settings: Settings) -> ModelFacts | None:
    return facts_of(record.entry, settings)


def tag_entry(record: Record, settings: Settings) -> dict:
    path = record.entry.path
    return {"name": tagged(record.name), "model": tagged(record.name), "modified_at": modified_at(path),
            "size": file_size(path), "digest": digest(path), "details": details(facts(record, settings)),
            "source": record.entry.source}


def show_body(record: Record, found: ModelFacts | None) -> dict:
    if found is None:
        raise ApiError(500, f"model '{record.name}': {os.path.basename(record.entry.path)} has no GGUF header "
                            f"this server can read", code="model_unreadable")
    stored = record.entry.defaults
    body = {
        "license": "",
        "modelfile": f"# served by localserve from its catalogue\nFROM {os.path.basename(record.entry.path)}\n",
        "parameters": parameters({"num_ctx": served_context(record, found), **dict(stored.options if stored else ())}),
        "template": shown_template(found),
        "details": details(found),
        "model_info": model_info(record, found),
        "capabilities": list(found.capabilities),
        "modified_at": modified_at(record.entry.path),
    }
    if stored is not None and stored.system:     # the system prompt Ollama's store keeps with the model
        body["system"] = stored.system
    return body


def served_context(record: Record, found: ModelFacts) -> int:
    """Each sequence's context: the loaded model's, else what its next load gives it."""
    model = record.served
    return model.chat.engine.n_ctx if model is not None else found.n_ctx


def parameters(values: dict) -> str:
    """Ollama's `parameters` text: a line per parameter, its name padded, its value as Go's %#v."""
    return "\n".join(f"{name:<{PARAMETER_NAME_WIDTH}} {shown_value(item)}" for name, value in values.items()
                     for item in (value if isinstance(value, list) else [value]))


def shown_value(value: object) -> str:
    """A string quoted (as Go's %#v shows a stop string), a number as it is."""
    return orjson.dumps(value).decode() if isinstance(value, str) else str(value)


def shown_template(found: ModelFacts) -> str:
    """The chat template; for a model with FIM tokens, behind the branch Ollama's own templates for
    such models open with, in Ollama's template language: a request with a suffix is laid out
    around the FIM tokens (as prompt/fim.py lays it out). Continue sends `suffix` only to a model
    whose template mentions `.Suffix`; else it renders its own guess at the model's FIM format."""
    if found.fim is None:
        return found.template
    pre, suf, mid = found.fim
    return "{{- if .Suffix }}" + pre + "{{ .Prompt }}" + suf + "{{ .Suffix }}" + mid + "{{- else }}" + \
        found.template + "{{- end }}"


def model_info(record: Record, found: ModelFacts) -> dict:
    arch = found.architecture
    return {"general.architecture": arch, "general.parameter_count": found.n_params,
            f"{arch}.context_length": found.n_ctx_train, f"{arch}.block_count": found.n_layer,
            "general.basename": os.path.splitext(os.path.basename(record.entry.path))[0]}


def details(found: ModelFacts | None) -> dict:
    if found is None:       # a file whose header cannot be read: its load will say why
        return {"parent_model": "", "format": "gguf", "family": "", "families": [], "parameter_size": "",
                "quantization_level": ""}
    return {"parent_model": "", "format": "gguf", "family": found.architecture, "families": [found.architecture],
            "parameter_size": found.parameter_size, "quantization_level": found.quantization}


def modified_at(path: str) -> str:
    try:
        return timestamp(os.path.getmtime(path))
    except OSError:
        return timestamp()


def file_size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def digest(path: str) -> str:
    """A name for this file's version (path, size, mtime), in a digest's shape: hashing the
    weights themselves would read gigabytes for a list."""
    try:
        stat = os.stat(path)
        key = f"{os.path.realpath(path)}\0{stat.st_size}\0{stat.st_mtime_ns}"
    except OSError:
        key = path
    return hashlib.sha256(key.encode()).hexdigest()
