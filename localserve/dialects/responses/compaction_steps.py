"""A Responses request's compaction, run once its model is held and before its own job is
submitted (compacting.py says when and what the items look like).

- compaction_trigger: every piece but the last is summarised here; the last is the response's
  own job, streamed and stored like any other, its summary becoming the one output item.
- a threshold passed, or an input that does not fit (context_management, truncation "auto"):
  the conversation is compacted here, waited for, and the response's job is built again from
  the summary and this request's own input.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...conversation import Message
from ...errors import ApiError
from ..compaction import CompactionOptions, compact, compact_pieces
from ..exchange import Exchange
from ..pump import open_stream_early
from .compacting import check_conversation, compaction_item, opened
from .items import to_messages
from .request import Plan

COMPACTING_COMMENT = b": compacting\n\n"     # a stream's keepalive while its input is compacted

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.served import ServedModel


def compact_as_planned(exchange: Exchange, model: ServedModel, plan: Plan, key: bytes, max_tokens: int,
                       keepalive: float) -> None:
    """Set plan.generation (and plan.compaction, once compacted) as the request asks. A stream's
    head goes out with the first `: compacting` comment, every `keepalive` seconds of a compaction
    waited for here; whatever fails after it (the compaction, the prompt built from its summary,
    the job's submission) is an error event in the stream (loading.serve_with_model, in the
    route's Responses shape: errors.py), and nothing of the response is stored."""
    plan.seal_compaction = lambda summary: compaction_item(key, summary)
    if not plan.triggered and not _needs_compaction(plan):
        return
    messages = compaction_messages(plan)
    check_conversation(messages)
    chat = dataclasses.replace(plan.chat, messages=messages)
    options = CompactionOptions(max_tokens=max_tokens, label=f"responses compaction {exchange.request_id}",
                                cache_key=plan.response["prompt_cache_key"])
    if plan.stream:
        options.on_wait, options.wait_interval = lambda: _comment(exchange), keepalive
    _compact(exchange, model, plan, key, chat, options)


def compaction_messages(plan: Plan) -> list[Message]:
    """The conversation compacted: the stored context and this request's input, each input
    image named by its place in `input` and taken as read_input decoded it."""
    return to_messages(plan.rendered, plan.response["instructions"], len(plan.rendered) - plan.n_context,
                       plan.images)


def _comment(exchange: Exchange) -> None:
    open_stream_early(exchange)
    exchange.writer.stream(COMPACTING_COMMENT)


def _compact(exchange: Exchange, model: ServedModel, plan: Plan, key: bytes, chat, options: CompactionOptions) -> None:
    if plan.triggered:
        last = compact_pieces(exchange, model, chat, options)
        plan.generation, plan.compaction_usage = last.step.request, last.usage
        return
    try:
        done = compact(exchange, model, chat, options)
    except ApiError as error:
        if error.code != "context_length_exceeded" or plan.truncation != "auto":
            raise
        plan.generation = plan.rebuild(plan.rendered, "auto")     # not even a summary fits: drop turns
        return
    plan.compaction, plan.compaction_usage = compaction_item(key, done.summary), done.usage
    summary = opened(plan.compaction, done.summary)
    try:
        plan.generation = plan.rebuild([summary, *plan.rendered[plan.n_context:]], plan.truncation)
    except ApiError as error:
        if error.code != "context_length_exceeded":
            raise
        plan.generation = plan.rebuild([summary], "disabled")     # its own input too long: the summary holds it


def _needs_compaction(plan: Plan) -> bool:
    if plan.generation is None:           # the input did not fit the context
        return True
    threshold = plan.management.compact_threshold
    return bool(threshold) and len(plan.generation.prompt_tokens) > threshold
