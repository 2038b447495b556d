"""GET /api/tags, POST /api/show, GET /api/ps: the catalogue as Ollama describes its models.

A model's `details`, `model_info` and `capabilities` come from the loaded model (its GGUF
header as llama.cpp read it, its chat template as probed at load): /api/show loads the model
it names, as a chat request would, so Copilot Chat's probe sees what the model can do. Lists
(tags, ps) read only the catalogue and what is already loaded.
"""

from __future__ import annotations

import hashlib
import os
from typing import TYPE_CHECKING

from ..exchange import Exchange
from ..services import Services
from .clock import expires_at, timestamp
from .names import serve_with_ollama_model, tagged

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.loaded import LoadedModel
    from ...models.record import Record


def list_tags(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    exchange.send_json({"models": [tag_entry(record) for record in models.all_models()]})


def list_running(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    running = []
    for record in models.all_models():
        model = record.loaded
        if model is None:
            continue
        size = model.memory_bytes
        engine = model.chat.engine
        on_gpu = engine.gpu_layers / engine.n_layer if engine.n_layer else 0.0
        running.append({"name": tagged(record.name), "model": tagged(record.name), "size": size,
                        "digest": digest(record.entry.path), "details": details(model),
                        "expires_at": expires_at(record.expires), "size_vram": int(size * min(on_gpu, 1.0)),
                        "context_length": engine.n_ctx})
    exchange.send_json({"models": running})


def show(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    body = exchange.json()

    def answer(model: LoadedModel) -> None:
        exchange.send_json(show_body(model))

    serve_with_ollama_model(exchange, models, body, answer)


def tag_entry(record: Record) -> dict:
    path = record.entry.path
    entry = {"name": tagged(record.name), "model": tagged(record.name), "modified_at": modified_at(path),
             "size": file_size(path), "digest": digest(path),
             "details": details(record.loaded) if record.loaded is not None else bare_details()}
    return entry


def show_body(model: LoadedModel) -> dict:
    return {
        "license": "",
        "modelfile": f"# served by localserve from its catalogue\nFROM {os.path.basename(model.entry.path)}\n",
        "parameters": "",
        "template": shown_template(model),
        "details": details(model),
        "model_info": model_info(model),
        "capabilities": capabilities(model),
        "modified_at": modified_at(model.entry.path),
    }


def shown_template(model: LoadedModel) -> str:
    """The chat template; for a model with FIM tokens, behind the branch Ollama's own templates for
    such models open with, in Ollama's template language: a request with a suffix is laid out
    around the FIM tokens (as prompt/fim.py lays it out). Continue sends `suffix` only to a model
    whose template mentions `.Suffix`; else it renders its own guess at the model's FIM format."""
    text = model.chat.template.text
    engine = model.chat.engine
    if engine.fim.missing():
        return text
    pre, suf, mid = (engine.piece(t).decode(errors="replace") for t in (engine.fim.pre, engine.fim.suf, engine.fim.mid))
    return "{{- if .Suffix }}" + pre + "{{ .Prompt }}" + suf + "{{ .Suffix }}" + mid + "{{- else }}" + text + "{{- end }}"


def model_info(model: LoadedModel) -> dict:
    engine = model.chat.engine
    info = engine.info
    arch = info.architecture
    return {"general.architecture": arch, "general.parameter_count": info.n_params,
            f"{arch}.context_length": info.n_ctx_train, f"{arch}.block_count": engine.n_layer,
            "general.basename": os.path.splitext(os.path.basename(info.path))[0]}


def capabilities(model: LoadedModel) -> list[str]:
    if model.embeddings_only:
        return ["embedding"]
    found = ["completion"]
    caps = model.chat.template.caps
    if caps.tools:
        found.append("tools")
    if model.chat.default_reasoning is not None or caps.reasoning or "<think>" in model.chat.template.text:
        found.append("thinking")
    if not model.chat.engine.fim.missing():      # /api/generate's suffix fills a hole
        found.append("insert")
    if model.chat.engine.has_vision:
        found.append("vision")
    return found


def details(model: LoadedModel) -> dict:
    info = model.chat.engine.info
    return {"parent_model": "", "format": "gguf", "family": info.architecture, "families": [info.architecture],
            "parameter_size": parameter_size(info.n_params), "quantization_level": quantization(info.description)}


def bare_details() -> dict:
    """What a list shows of a model not loaded: its header is read when it loads."""
    return {"parent_model": "", "format": "gguf", "family": "", "families": [], "parameter_size": "",
            "quantization_level": ""}


def parameter_size(n_params: int) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n_params >= scale:
            return f"{n_params / scale:.1f}{unit}"
    return str(n_params)


def quantization(description: str) -> str:
    """llama.cpp's model description ends with the weights' type: "llama 1B Q4_K - Medium"."""
    parts = description.split(" ", 2)
    kind = parts[2] if len(parts) == 3 else ""
    return kind.removeprefix("all ").replace(" - Medium", "_M").replace(" - Small", "_S").replace(" - Large", "_L")


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
