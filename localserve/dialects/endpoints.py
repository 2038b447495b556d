"""Endpoints about the server and the model: health, models, tokenize, templates."""

from __future__ import annotations

import time
from typing import Any

from ..errors import ApiError
from .fields import invalid, read_bool
from ..prompt.build import ChatInput, ChatModel, function_definitions, render_chat, tokenize_capped
from ..settings import Settings
from .openai.chat import read_messages
from .exchange import Exchange


def health(exchange: Exchange) -> None:
    app = exchange.app
    if not app.ready.is_set():
        exchange.send_json({"status": "loading"}, status=503)
        return
    # exactly {"status": "ok"} as llama-server answers, plus the devices when layers live
    # elsewhere (RPC workers, GPUs); slots and queue are in /slots and /metrics
    body: dict[str, Any] = {"status": "ok"}
    if app.model is not None and any(d.kind != "cpu" for d in app.model.engine.devices):
        body["devices"] = [device.as_json() for device in app.model.engine.devices]   # as of start-up
    exchange.send_json(body)


def model_object(model: ChatModel, model_id: str, created: int, settings: Settings) -> dict:
    engine, info = model.engine, model.engine.info
    return {
        "id": model_id,
        "object": "model",
        "created": created,
        "owned_by": "localserve",
        "meta": {
            "n_ctx": engine.n_ctx,
            "n_ctx_train": info.n_ctx_train,
            "n_params": info.n_params,
            "n_vocab": info.n_vocab,
            "eog_tokens": engine.eog_tokens,
            "size": info.size,
            "architecture": info.architecture,
            "description": info.description,
            "chat_template_source": model.template.source,
            "tool_syntax": model.tool_syntax,
            "n_gpu_layers": settings.n_gpu_layers,
            "n_layer": engine.n_layer,
            "gpu_layers_offloaded": engine.gpu_layers,
            "slots": settings.slots,
            "devices": [device.as_json() for device in engine.devices],
            "cpu_weights": engine.weight_plan.mode,
            "weight_buffers_mib": engine.weight_buffers,       # {"CPU_REPACK": 52.5, "CPU": 182.7}
        },
    }


def anthropic_model_object(model: ChatModel, model_id: str, created: int) -> dict:
    """The same model as Anthropic's Models API describes one (clients send anthropic-version)."""
    created_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(created))
    return {"type": "model", "id": model_id, "display_name": model_id, "created_at": created_at,
            "lifecycle": "active", "max_input_tokens": model.engine.n_ctx}


def _model_object(exchange: Exchange) -> dict:
    app = exchange.app
    if wants_anthropic(exchange):
        return anthropic_model_object(app.model, app.model_id, app.created)
    return model_object(app.model, app.model_id, app.created, app.settings)


def wants_anthropic(exchange: Exchange) -> bool:
    return exchange.request.header("anthropic-version") is not None


def list_models(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    model = _model_object(exchange)
    if wants_anthropic(exchange):
        exchange.send_json({"data": [model], "has_more": False, "first_id": model["id"], "last_id": model["id"]})
        return
    exchange.send_json({"object": "list", "data": [model]})


def get_model(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    if exchange.params["model"] != app.model_id:
        raise ApiError(404, f"model '{exchange.params['model']}' does not exist; this server serves "
                            f"'{app.model_id}'", param="model", code="model_not_found")
    exchange.send_json(_model_object(exchange))


def tokenize(exchange: Exchange) -> None:
    """llama.cpp's shape: {"content", "add_special", "with_pieces"} → {"tokens": [...]}."""
    app = exchange.app
    app.require_ready()
    body = exchange.json()
    content = body.get("content")
    if not isinstance(content, str):
        raise invalid("content", "expected a string")
    tokens = tokenize_capped(app.model.engine, content, "content", add_special=read_bool(body, "add_special", False),
                             parse_special=read_bool(body, "parse_special", True))
    if read_bool(body, "with_pieces"):
        pieces = []
        for token in tokens:
            raw = app.model.engine.piece(token)
            try:
                piece: Any = raw.decode("utf-8")
            except UnicodeDecodeError:
                piece = list(raw)
            pieces.append({"id": token, "piece": piece})
        exchange.send_json({"tokens": pieces})
    else:
        exchange.send_json({"tokens": tokens})


def detokenize(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    body = exchange.json()
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise invalid("tokens", "expected an array of token ids")
    engine = app.model.engine
    bad = [t for t in tokens if not engine.valid_token(t)]
    if bad:
        raise invalid("tokens", f"token id {bad[0]} is outside the vocabulary")
    exchange.send_json({"content": engine.detokenize(tokens)})


def apply_template(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    body = exchange.json()
    chat = ChatInput(messages=read_messages(body), tools=function_definitions(body.get("tools")),
                     template_kwargs=dict(body.get("chat_template_kwargs") or {}))
    exchange.send_json({"prompt": render_chat(app.model.template, chat)})


def slots(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    exchange.send_json(app.runtime.slot_state())
