"""From a Messages body to its prompt: the input read, context edits applied, the chat
rendered, and where the last cache_control breakpoint falls in the prompt's tokens.

/v1/messages and /v1/messages/count_tokens both come through here, so the count is the
prompt the same request would run; count_tokens stops after tokenizing (no runtime job).

Usage as Anthropic reports it, from the breakpoint: of the prompt, the tokens the
prompt cache already held are cache_read_input_tokens; the tokens from there up to the
breakpoint are what this request newly caches (cache_creation_input_tokens); the rest
is input_tokens. The three sum to the prompt. A request without cache_control creates
nothing (all its new tokens are input_tokens), as on Anthropic's API.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

from ...conversation import Message, Text, ToolResult
from ...prompt.build import ChatInput, ChatModel, fit_images, render_prompt, tokenize_shown
from ...prompt.messages import result_text
from ...prompt.room import RenderLimit, sent_roles
from .compaction import Compact
from .edits import EditResult, apply_edits, compact_edit, read_edits
from .input import MessagesInput, read_input

# Appended to the marked message's text in a second rendering only, to find where the
# breakpoint lands in the prompt (a private-use character: no template tests for it).
_MARK = "\ue000"


@dataclass
class MessagesPrompt:
    input: MessagesInput
    text: str
    edits: EditResult | None          # None: the request has no context_management
    cache_breakpoint_tokens: int = 0  # prompt tokens up to the last breakpoint (0: none)
    tokens: list[int] | None = None   # the prompt's tokens, when the edits counted them already
    compact: Compact | None = None    # a compact_20260112 edit, for the handler to run

    @property
    def chat(self) -> ChatInput:
        return self.input.chat

    def context_management(self) -> dict | None:
        return None if self.edits is None else {"applied_edits": self.edits.applied}


def read_prompt(chat_model: ChatModel, signing_key: bytes, body: dict, *, breakpoints: bool = True,
                check_client: Callable[[], None] = lambda: None, to_run: bool = False) -> MessagesPrompt:
    """The request's prompt text; `breakpoints`: also find the cache breakpoint's token;
    check_client raises when the client has left (between context edits, before the render).
    `to_run`: the prompt runs as it is rendered, unless context edits may shorten it: one that
    cannot fit the context is refused as soon as its render shows it (prompt/room.py)."""
    edit_list = read_edits(body, chat_model.engine.n_ctx)
    limit = chat_model.fit_limit() if to_run and edit_list is None else RenderLimit.to_count()
    limit.check_turns(sent_roles(body.get("messages")))      # before they are read (prompt/room.py)
    messages_input = read_input(body, signing_key)
    chat = messages_input.chat
    fit_images(chat_model, chat)         # before the edits count: count_tokens counts what /v1/messages runs
    edits = None
    counted: list[tuple[list[Message], str, list[int]]] = []  # each message list counted: its text, tokens
    if edit_list is not None:
        def count(messages: list[Message]) -> int:
            text = render_prompt(chat_model, dataclasses.replace(chat, messages=messages), limit)
            counted.append((messages, text, tokenize_shown(chat_model.engine, text, messages)))
            return len(counted[-1][2])
        edits = apply_edits(edit_list, chat.messages, count, check_client)
        # the breakpoint keeps its index: edits change messages, never add or drop one
        chat.messages = edits.messages
        check_client()
    # the edits' last count may have been of the messages they left: rendered and tokenized once
    text, tokens = next(((text, tokens) for messages, text, tokens in counted if messages is chat.messages),
                        (None, None))
    prompt = MessagesPrompt(messages_input, render_prompt(chat_model, chat, limit) if text is None else text, edits,
                            tokens=tokens, compact=compact_edit(edit_list))
    if breakpoints and messages_input.cache_breakpoint is not None:
        prompt.cache_breakpoint_tokens = _breakpoint_tokens(chat_model, chat, messages_input.cache_breakpoint,
                                                            prompt.text, limit)
    return prompt


def _breakpoint_tokens(chat_model: ChatModel, chat: ChatInput, index: int, text: str, limit: RenderLimit) -> int:
    """Prompt tokens up to the end of message `index`: render once more with a mark there;
    the text before the mark, when the real prompt starts with it, is tokenized."""
    marked = list(chat.messages)
    marked[index] = _with_mark(chat.messages[index])
    marked_text = render_prompt(chat_model, dataclasses.replace(chat, messages=marked), limit)
    cut = marked_text.find(_MARK)
    if cut < 0 or not text.startswith(marked_text[:cut]):
        return 0
    # a part of the prompt, which must fit the context as the whole must (a prompt too long for
    # it is context_length_exceeded, whatever its size, not a text too long to count)
    return len(tokenize_shown(chat_model.engine, marked_text[:cut], chat.messages, fit=True))


def _with_mark(message: Message) -> Message:
    """The message with the mark after its text (a tool result's text as the template shows it)."""
    parts = list(message.parts)
    for i in reversed(range(len(parts))):
        part = parts[i]
        if isinstance(part, ToolResult):
            parts[i] = dataclasses.replace(part, content=result_text(part) + _MARK, is_error=False)
            break
        if isinstance(part, Text):
            parts[i] = Text(part.text + _MARK)
            break
    else:
        parts.append(Text(_MARK))
    return dataclasses.replace(message, parts=tuple(parts))


def cache_usage(prompt_tokens: int, cached_tokens: int, breakpoint_tokens: int) -> dict:
    """input_tokens + cache_read + cache_creation = the prompt."""
    cached = min(cached_tokens, prompt_tokens)
    created = max(0, min(breakpoint_tokens, prompt_tokens) - cached)
    return {"input_tokens": prompt_tokens - cached - created, "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": created}
