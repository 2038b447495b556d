"""Endpoints about the server and the model: health, models, tokenize, templates."""

from __future__ import annotations

import time
from typing import Any

from ..errors import ApiError
from .fields import invalid, read_bool
from ..prompt.build import ChatInput, function_definitions, render_chat, tokenize_capped
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
    if app.engine is not None and any(d.kind != "cpu" for d in app.engine.devices):
        body["devices"] = [device.as_json() for device in app.engine.devices]   # as of start-up
    exchange.send_json(body)


def model_object(app: Any) -> dict:
    info = app.engine.info
    return {
        "id": app.model_id,
        "object": "model",
        "created": app.created,
        "owned_by": "localserve",
        "meta": {
            "n_ctx": app.engine.n_ctx_seq,
            "n_ctx_train": info.n_ctx_train,
            "n_params": info.n_params,
            "n_vocab": info.n_vocab,
            "eog_tokens": app.engine.eog_tokens,
            "size": info.size,
            "architecture": info.architecture,
            "description": info.description,
            "chat_template_source": app.template.source,
            "tool_syntax": app.tool_syntax,
            "n_gpu_layers": app.settings.n_gpu_layers,
            "n_layer": app.engine.n_layer,
            "gpu_layers_offloaded": app.engine.gpu_layers,
            "slots": app.settings.slots,
            "devices": [device.as_json() for device in app.engine.devices],
            "cpu_weights": app.engine.weight_plan.mode,
            "weight_buffers_mib": app.engine.weight_buffers,       # {"CPU_REPACK": 52.5, "CPU": 182.7}
        },
    }


def anthropic_model_object(app: Any) -> dict:
    """The same model as Anthropic's Models API describes one (clients send anthropic-version)."""
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(app.created))
    return {"type": "model", "id": app.model_id, "display_name": app.model_id, "created_at": created,
            "lifecycle": "active", "max_input_tokens": app.engine.n_ctx_seq}


def wants_anthropic(exchange: Exchange) -> bool:
    return exchange.request.header("anthropic-version") is not None


def list_models(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    if wants_anthropic(exchange):
        model = anthropic_model_object(app)
        exchange.send_json({"data": [model], "has_more": False, "first_id": model["id"], "last_id": model["id"]})
        return
    exchange.send_json({"object": "list", "data": [model_object(app)]})


def get_model(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    if exchange.params["model"] != app.model_id:
        raise ApiError(404, f"model '{exchange.params['model']}' does not exist; this server serves "
                            f"'{app.model_id}'", param="model", code="model_not_found")
    exchange.send_json(anthropic_model_object(app) if wants_anthropic(exchange) else model_object(app))


def tokenize(exchange: Exchange) -> None:
    """llama.cpp's shape: {"content", "add_special", "with_pieces"} → {"tokens": [...]}."""
    app = exchange.app
    app.require_ready()
    body = exchange.json()
    content = body.get("content")
    if not isinstance(content, str):
        raise invalid("content", "expected a string")
    tokens = tokenize_capped(app, content, "content", add_special=read_bool(body, "add_special", False),
                             parse_special=read_bool(body, "parse_special", True))
    if read_bool(body, "with_pieces"):
        pieces = []
        for token in tokens:
            raw = app.engine.piece(token)
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
    bad = [t for t in tokens if not app.engine.valid_token(t)]
    if bad:
        raise invalid("tokens", f"token id {bad[0]} is outside the vocabulary")
    exchange.send_json({"content": app.engine.detokenize(tokens)})


def apply_template(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    body = exchange.json()
    chat = ChatInput(messages=read_messages(body), tools=function_definitions(body.get("tools")),
                     template_kwargs=dict(body.get("chat_template_kwargs") or {}))
    exchange.send_json({"prompt": render_chat(app, chat)})


def slots(exchange: Exchange) -> None:
    app = exchange.app
    app.require_ready()
    exchange.send_json(app.runtime.slot_state())
