"""llama-server's GET /props: the loaded model's context, slots, template and modalities.

What its clients read: Zed's llama.cpp provider takes default_generation_settings.n_ctx as
the context, modalities.vision for images and chat_template_caps for tools; SillyTavern
hashes chat_template to pick a matching template; llama-server's web UI shows model_path,
build_info and the modalities. `?model=NAME` names the model (a router's clients send it);
without it, the one model served (or, from a catalogue, the one loaded: a 400 naming the
choice when none or several are). model_path is the file's name, not its path: a client
learns no directory of the operator's. POST /props changes nothing here (a 501, as
llama-server without --props answers).
"""

from __future__ import annotations

import os
from functools import partial
from typing import TYPE_CHECKING, Any

from ... import __version__
from ...errors import ApiError
from ...generation import SamplingParams
from ..exchange import Exchange, RouteTable
from ..loading import LoadWait, use_model
from ..openai.completion_images import LIBMTMD_MARKER
from ..services import Services
from .completion import generation_settings
from .errors import LLAMA_ERRORS
from .model_choice import named_model

if TYPE_CHECKING:
    from ...models.served import ServedModel


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/props", "GET", partial(get_props, services), errors=LLAMA_ERRORS)
    table.add("/props", "POST", post_props, errors=LLAMA_ERRORS)


def get_props(services: Services, exchange: Exchange) -> None:
    name = named_model(services, exchange.request.query, "/props")
    with use_model(services.ready(), {"model": name}, LoadWait(exchange)) as model:
        exchange.send_json(props(model))


def props(model: ServedModel) -> dict[str, Any]:
    engine, template = model.chat.engine, model.chat.template
    defaults = SamplingParams()
    return {
        "default_generation_settings": {
            "n_ctx": engine.n_ctx,
            "params": generation_settings(defaults, -1, [], engine.n_ctx),
        },
        "total_slots": model.settings.slots,
        "model_alias": model.model_id,
        "model_path": os.path.basename(model.entry.path),
        "modalities": {"vision": engine.has_vision, "audio": engine.has_audio, "video": False},
        "media_marker": LIBMTMD_MARKER,
        "endpoint_slots": True, "endpoint_props": False, "endpoint_metrics": True,
        "chat_template": template.text,
        "chat_template_caps": template_caps(template.caps),
        "bos_token": engine.info.bos_token,
        "eos_token": engine.info.eos_token,
        "build_info": f"localserve {__version__}",
        "is_sleeping": False,
    }


def template_caps(caps) -> dict[str, bool]:
    """What the probed template shows (prompt/probe.py), in llama.cpp's names (common/jinja/caps)."""
    return {
        "supports_tools": caps.tools, "supports_tool_calls": caps.tool_calls,
        "supports_parallel_tool_calls": caps.parallel_tool_calls, "supports_system_role": caps.system_role,
        "supports_string_content": True, "supports_preserve_reasoning": caps.reasoning,
        "supports_object_arguments": caps.arguments == "object",
    }


def post_props(exchange: Exchange) -> None:
    if exchange.has_body():
        exchange.json()         # a malformed body is a 400 first, as on every route
    raise ApiError(501, "this server's properties cannot be changed at run time (llama-server's POST /props "
                        "needs --props; localserve has none)", code="not_supported")
