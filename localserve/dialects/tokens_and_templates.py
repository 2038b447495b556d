"""llama.cpp's helper endpoints: tokenize, detokenize, apply-template (on the model the body names)."""

from __future__ import annotations

from functools import partial
from typing import Any

from ..errors import ApiError
from ..prompt.build import ChatInput, ChatModel, render_prompt, tokenize_capped
from ..prompt.media import shown_prompt
from ..prompt.room import sent_roles
from .image_parts import report_omitted
from .exchange import Exchange, RouteTable
from .failures import prompt_refusals
from .fields import invalid, read_bool, read_template_kwargs
from .function_tools import function_definitions
from .limits import MAX_DETOKENIZE_TOKENS
from .loading import LoadWait, use_model
from .openai.chat_input import read_messages
from .responses.request import read_plan
from .services import Services


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/tokenize", "POST", partial(tokenize, services))
    table.add("/detokenize", "POST", partial(detokenize, services))
    table.add("/apply-template", "POST", partial(apply_template, services))


def tokenize(services: Services, exchange: Exchange) -> None:
    """llama.cpp's shape: {"content", "add_special", "with_pieces"} → {"tokens": [...]}."""
    body = exchange.json()
    with use_model(services.ready(), body, LoadWait(exchange)) as model, prompt_refusals("content"):
        _tokenize(exchange, model.chat, body)


def _tokenize(exchange: Exchange, chat_model: ChatModel, body: dict) -> None:
    content = body.get("content")
    if not isinstance(content, str):
        raise invalid("content", "expected a string")
    tokens = tokenize_capped(chat_model.engine, content, "content", add_special=read_bool(body, "add_special", False),
                             parse_special=read_bool(body, "parse_special", True))
    if read_bool(body, "with_pieces"):
        pieces = []
        for token in tokens:
            raw = chat_model.engine.piece(token)
            try:
                piece: Any = raw.decode("utf-8")
            except UnicodeDecodeError:
                piece = list(raw)
            pieces.append({"id": token, "piece": piece})
        exchange.send_json({"tokens": pieces})
    else:
        exchange.send_json({"tokens": tokens})


def detokenize(services: Services, exchange: Exchange) -> None:
    body = exchange.json()
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise invalid("tokens", "expected an array of token ids")
    if len(tokens) > MAX_DETOKENIZE_TOKENS:
        raise invalid("tokens", f"has {len(tokens)} tokens; at most {MAX_DETOKENIZE_TOKENS} are detokenized at once "
                                f"(MAX_DETOKENIZE_TOKENS)")
    with use_model(services.ready(), body, LoadWait(exchange)) as model:
        engine = model.chat.engine
        bad = [t for t in tokens if not engine.valid_token(t)]
        if bad:
            raise invalid("tokens", f"token id {bad[0]} is outside the vocabulary")
        exchange.send_json({"content": engine.detokenize(tokens)})


def apply_template(services: Services, exchange: Exchange) -> None:
    """Chat messages rendered by the template; or, for a Responses body (`input`), the prompt
    POST /v1/responses would give the model, its stored chain or conversation included."""
    body = exchange.json()
    if "input" in body and "messages" not in body:
        _apply_responses_template(services, exchange, body)
        return
    with use_model(services.ready(), body, LoadWait(exchange)) as model, prompt_refusals():
        # the prompt the model would run: one that cannot fit its context is the 400 the run would
        # be, as soon as that is certain (prompt/room.py), before its messages are read
        limit = model.chat.fit_limit()
        limit.check_turns(sent_roles(body.get("messages")))
        chat = ChatInput(messages=read_messages(body), tools=function_definitions(body.get("tools")),
                         template_kwargs=read_template_kwargs(body),
                         add_generation_prompt=read_bool(body, "add_generation_prompt", True))
        prompt = render_prompt(model.chat, chat, limit)
        report_omitted(exchange, chat.images_omitted, f"apply-template {exchange.request_id}",
                       audio=chat.audio_omitted)
        exchange.send_json({"prompt": prompt})


def _apply_responses_template(services: Services, exchange: Exchange, body: dict) -> None:
    body = {**body, "stream": False, "background": False, "store": False}    # read, never run nor stored
    with use_model(services.ready(), body, LoadWait(exchange)) as model:
        scope = exchange.scope
        plan = read_plan(body, exchange.request_id, chat_model=model.chat, model_id=model.model_id,
                         signing_key=services.signing_key_for(scope), store=services.store_for(scope))
        if plan.generation is None:     # a compaction's, or an input only a compaction would fit: none yet
            raise ApiError(400, "this input renders only once it is compacted, when the response runs (a "
                                "compaction_trigger, or context_management on an input that does not fit)",
                           param="input", code="compaction_required")
        tokens = plan.generation.prompt_tokens
        report_omitted(exchange, plan.generation.images_omitted, f"apply-template {exchange.request_id}",
                       audio=plan.generation.audio_omitted)
        exchange.send_json({"prompt": shown_prompt(model.chat.engine, tokens, plan.generation.images),
                            "prompt_tokens": len(tokens)})
