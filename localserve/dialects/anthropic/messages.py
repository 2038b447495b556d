"""Anthropic Messages: POST /v1/messages (whole or streamed) and /v1/messages/count_tokens.

Input conversion lives in input.py and prompt.py; here the request becomes a GenerationRequest,
answered in replies.py's shapes; a prompt past its compaction trigger is compacted first
(compacting.py); answer.py builds the answer's job either way. A request on a thread
(threads.py) is answered as its whole conversation, and its reply kept with the thread.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from .. import stored_defaults
from ..choices import refuse_choices
from ...generation import GenerationRequest
from ...prompt.build import ChatModel, tokenize_shown
from ...prompt.compaction import leading_system
from ..loading import LoadWait, use_model
from ..request_cycle import Reply, serve_generation, wants_stream
from ..exchange import Exchange
from ..services import Services
from ..failures import prompt_refusals
from ...store.threads import ThreadRecords
from ..image_parts import report_omitted
from ...parsing.tool_families import new_call_id
from .answer import AnswerBuilder
from .compacting import compacted, compacting_reply
from .compaction import is_summary, read_summarize
from .prompt import MessagesPrompt, read_prompt
from .replies import MessageMeta, final_answer, message_stream
from .threads import ThreadTurn, open_thread
from .tools_and_thinking import check_budget_below_max_tokens
from ..fields import (IGNORED_TOOLS_HEADER, ignored_tools_value, invalid, read_dict, read_int, read_sampling, read_stop,
                     read_str)

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.served import ServedModel

log = logging.getLogger("localserve.anthropic")


def handle_messages(services: Services, exchange: Exchange) -> None:
    services.ready()
    body = exchange.json()
    # before the model's stored defaults fill the body: a continue's own system is refused, not theirs
    store = services.store_for(exchange.scope)
    turn = open_thread(body, ThreadRecords(store) if store is not None else None)
    try:
        if turn is not None and turn.held is not None:
            log.info("messages %s: continues the thread at %s (%d messages held, %d new)", exchange.request_id,
                     turn.held.previous_message_id, len(turn.held.state["messages"]), len(turn.messages))
        serve_generation(exchange, services, lambda model, body: read_reply(services, exchange, body, model, turn),
                         body=body if turn is None else turn.body, stored=stored_defaults.MESSAGES)
    finally:
        if turn is not None:
            turn.close()


def read_reply(services: Services, exchange: Exchange, body: dict, model: ServedModel,
               turn: ThreadTurn | None = None) -> Reply:
    name = read_model(body, model.model_id)
    signing_key = services.signing_key_for(exchange.scope)
    with prompt_refusals():
        gen_request, prompt, answer = read_request(model.chat, signing_key, body, exchange.request_id,
                                                   check_client=exchange.raise_if_gone,
                                                   betas=exchange.request.header("anthropic-beta"))
    if prompt.input.ignored_tools:
        ignored = ignored_tools_value(prompt.input.ignored_tools)
        log.info("messages %s: server tools left out (they cannot run here): %s", exchange.request_id, ignored)
        exchange.writer.extra_headers.append((IGNORED_TOOLS_HEADER, ignored))
    meta = MessageMeta(new_call_id("msg_"), name, signing_key, prompt.input.thinking.omitted,
                       prompt.cache_breakpoint_tokens, prompt.context_management(),
                       on_reply=turn.keep if turn is not None else None)
    if gen_request is None:         # past its compaction trigger: summarised first
        log.info("messages %s: compacting the conversation before the answer", exchange.request_id)
        assert prompt.compact is not None
        return compacting_reply(exchange, model, prompt.chat, answer, meta, prompt.compact, stream=wants_stream(body),
                                max_tokens=services.settings.compact_max_tokens, keepalive=services.prefill_keepalive)
    return Reply(gen_request, shape=lambda gen: message_stream(meta, gen),
                 whole=lambda output: final_answer(output, meta))


def handle_count_tokens(services: Services, exchange: Exchange) -> None:
    """The prompt /v1/messages would render for the same body, counted (max_tokens not needed):
    rendering and tokenizing on this thread, no job for the runtime."""
    models = services.ready()
    body = exchange.json()
    with use_model(models, body, LoadWait(exchange)) as model, prompt_refusals():
        prompt = read_prompt(model.chat, services.signing_key_for(exchange.scope), body, breakpoints=False,
                             check_client=exchange.raise_if_gone)
        report_omitted(exchange, prompt.chat.images_omitted, f"count_tokens {exchange.request_id}")
        tokens = (prompt.tokens if prompt.tokens is not None
                  else tokenize_shown(model.chat.engine, prompt.text, prompt.chat.messages))
        answer: dict[str, Any] = {"input_tokens": len(tokens)}
    if prompt.edits is not None:
        original = prompt.edits.original_tokens
        answer["context_management"] = {"original_input_tokens": answer["input_tokens"] if original is None
                                         else original}
    exchange.send_json(answer)


def read_model(body: dict, model_id: str) -> str:
    """The name the reply echoes: the one asked (an alias stays an alias; with one model
    served alone, whatever name was asked)."""
    return read_str(body, "model") or model_id


def read_request(chat_model: ChatModel, signing_key: bytes, body: dict, request_id: str,
                 check_client: Callable[[], None] = lambda: None,
                 betas: str | None = None) -> tuple[GenerationRequest | None, MessagesPrompt, AnswerBuilder]:
    """The answer's job, and how to make it again for a compacted conversation; no job when the
    prompt passes its compaction trigger. betas: the anthropic-beta header (interleaved thinking
    lifts the budget's limit)."""
    max_tokens = read_int(body, "max_tokens", low=1)
    if max_tokens is None:
        raise invalid("max_tokens", "this field is required")
    refuse_choices(body, "n: Extra inputs are not permitted (Messages answers one message per request)")
    read_dict(body, "metadata")          # accepted (user_id); nothing here uses it
    # a prompt to run, unless the `compaction` parameter summarises it first
    prompt = read_prompt(chat_model, signing_key, body, check_client=check_client, to_run=body.get("compaction") is None)
    prompt.compact = read_summarize(body) or prompt.compact       # count_tokens ignores `compaction`
    check_budget_below_max_tokens(body.get("thinking"), max_tokens, betas)
    sampling = read_sampling(body, chat_model.engine.n_vocab, temperature_high=1.0)
    stop = read_stop(body, "stop_sequences")
    answer = AnswerBuilder(chat_model, sampling, max_tokens, stop, f"messages {request_id}")
    if compaction_due(chat_model, prompt):
        answer.build(compacted(prompt.chat, ""))     # what the answer's job would refuse, refused before the summary
        return None, prompt, answer
    return answer.build(prompt.chat, prompt.text), prompt, answer


def compaction_due(chat_model: ChatModel, prompt: MessagesPrompt) -> bool:
    """The prompt passes its compact edit's trigger, or is too long for the context (compacted,
    it may fit). Not when the conversation is a summary already and nothing else (a paused
    compaction's block sent back, the system prompt and tools past the trigger on their own):
    its summary would shorten nothing, and every turn would compact again."""
    compact = prompt.compact
    if compact is None:
        return False
    tokens = len(prompt.tokens if prompt.tokens is not None
                 else tokenize_shown(chat_model.engine, prompt.text, prompt.chat.messages))
    if tokens >= chat_model.engine.n_ctx:
        return True
    messages = prompt.chat.messages[leading_system(prompt.chat.messages):]
    asked = compact.trigger == 0          # the compaction parameter: the compaction is the answer
    return tokens > compact.trigger and (asked or not all(is_summary(m) for m in messages))
