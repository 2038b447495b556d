"""POST /v1/responses/compact: a conversation compacted at once, nothing stored.

The body names the model, the `input` (and or a `previous_response_id` whose chain goes
before it), `instructions` (the system message, as on /v1/responses), `tools` (rendered as in
the turns being compacted, so their cached prefix serves) and `prompt_cache_key`. The answer is
a `response.compaction`: the user messages kept (newest first while they fit a quarter of the
context, in their order), then one `compaction` item whose `encrypted_content` seals the
summary the model wrote; `usage` counts every job the compaction ran.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ...generation import GenerationOutput
from ...prompt.build import ChatInput
from ...store.store import new_id
from ..compaction import CompactionOptions, compact
from ..exchange import Exchange
from ..fields import read_str, read_template_kwargs
from ..loading import serve_with_model
from .compacting import check_conversation, compaction_item, kept_user_items
from .items import to_messages
from .request import read_turn, storage_off
from .stream import usage
from .tools import read_tools

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.served import ServedModel
    from ..services import Services


def compact_conversation(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    body = exchange.json()
    serve_with_model(exchange, models, body,
                     lambda model: exchange.send_json(compacted(services, exchange, model, body)))


def compacted(services: Services, exchange: Exchange, model: ServedModel, body: dict) -> dict:
    instructions = read_str(body, "instructions")
    previous_id = read_str(body, "previous_response_id")
    store = services.store_for(exchange.scope)
    if previous_id and store is None:
        raise storage_off("previous_response_id")
    turn = read_turn(body, store, previous_id, None)
    key = services.signing_key_for(exchange.scope)
    chat = ChatInput(messages=to_messages(turn.opened(key), instructions, len(turn.read), turn.images),
                     tools=read_tools(body).definitions,
                     template_kwargs=read_template_kwargs(body))
    check_conversation(chat.messages)
    options = CompactionOptions(max_tokens=services.settings.compact_max_tokens,
                                label=f"responses compact {exchange.request_id}",
                                cache_key=read_str(body, "prompt_cache_key"))
    done = compact(exchange, model, chat, options)
    kept = kept_user_items(model, [item for item in turn.context + turn.items if item["type"] == "message"])
    return {"id": new_id("resp"), "object": "response.compaction", "created_at": int(time.time()),
            "output": [*kept, compaction_item(key, done.summary)], "usage": usage(GenerationOutput(), done.usage)}
