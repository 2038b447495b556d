"""Token counts before a request runs, as llama-server answers them:
POST /v1/responses/input_tokens (OpenAI's own endpoint: the SDK's `responses.input_tokens.count`)
and POST /v1/chat/completions/input_tokens (llama-server's, for a Chat Completions body), with
or without the /v1. Both answer `{"object": "response.input_tokens", "input_tokens": N}`: the
prompt tokens the same body would run, built exactly as the request would build them (the
template, the tools, a stored chain or conversation, images) and counted; nothing runs, nothing
is stored. A prompt longer than the context is the 400 the request itself would get.
"""

from __future__ import annotations

from functools import partial

from ...errors import ApiError
from ..exchange import Exchange, RouteTable
from ..failures import prompt_refusals
from ..image_parts import report_omitted
from ..loading import LoadWait, use_model
from ..openai import chat
from ..responses.request import read_plan
from ..services import Services
from .errors import LLAMA_ERRORS


def add_routes(table: RouteTable, services: Services) -> None:
    for prefix in ("/v1", ""):
        table.add(f"{prefix}/chat/completions/input_tokens", "POST", partial(chat_input_tokens, services),
                  errors=LLAMA_ERRORS)
        table.add(f"{prefix}/responses/input_tokens", "POST", partial(responses_input_tokens, services),
                  errors=LLAMA_ERRORS)


def counted(n: int) -> dict:
    return {"object": "response.input_tokens", "input_tokens": n}


def chat_input_tokens(services: Services, exchange: Exchange) -> None:
    body = {**exchange.json(), "stream": False}
    with use_model(services.ready(), body, LoadWait(exchange)) as model, prompt_refusals():
        request = chat.read_request(model.chat, body, exchange.request_id)
        report_omitted(exchange, request.images_omitted, f"input_tokens {exchange.request_id}",
                       audio=request.audio_omitted)
        exchange.send_json(counted(len(request.prompt_tokens)))


def responses_input_tokens(services: Services, exchange: Exchange) -> None:
    body = {**exchange.json(), "stream": False, "background": False, "store": False}    # read, never run nor stored
    with use_model(services.ready(), body, LoadWait(exchange)) as model, prompt_refusals("input"):
        scope = exchange.scope          # the key's own stored chain and sealed reasoning
        plan = read_plan(body, exchange.request_id, chat_model=model.chat, model_id=model.model_id,
                         signing_key=services.signing_key_for(scope), store=services.store_for(scope),
                         check_client=exchange.raise_if_gone)
        if plan.generation is None:     # a compaction's first: what runs after it is not known yet
            raise ApiError(400, "this input is compacted before it runs (a compaction_trigger, or "
                                "context_management on an input that does not fit): its tokens are known only then",
                           param="input", code="compaction_required")
        report_omitted(exchange, plan.generation.images_omitted, f"input_tokens {exchange.request_id}",
                       audio=plan.generation.audio_omitted)
        exchange.send_json(counted(len(plan.generation.prompt_tokens)))
