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

from ...prompt.build import ChatInput, ChatModel, render_chat, tokenize_prompt
from .edits import EditResult, apply_edits, read_edits
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

    @property
    def chat(self) -> ChatInput:
        return self.input.chat

    def context_management(self) -> dict | None:
        return None if self.edits is None else {"applied_edits": self.edits.applied}


def read_prompt(model: ChatModel, signing_key: bytes, body: dict, *, breakpoints: bool = True,
                check_client: Callable[[], None] = lambda: None) -> MessagesPrompt:
    """The request's prompt text; `breakpoints`: also find the cache breakpoint's token;
    check_client raises when the client has left (between context edits, before the render)."""
    messages_input = read_input(body, signing_key)
    chat = messages_input.chat
    edit_list = read_edits(body)
    edits = None
    if edit_list is not None:
        def count(messages: list[dict]) -> int:
            return len(tokenize_prompt(model.engine, render_chat(model.template, dataclasses.replace(chat, messages=messages))))
        edits = apply_edits(edit_list, chat.messages, count, check_client)
        # the breakpoint keeps its index: edits change messages, never add or drop one
        chat.messages = edits.messages
        check_client()
    text = render_chat(model.template, chat)
    prompt = MessagesPrompt(messages_input, text, edits)
    if breakpoints and messages_input.cache_breakpoint is not None:
        prompt.cache_breakpoint_tokens = _breakpoint_tokens(model, chat, messages_input.cache_breakpoint, text)
    return prompt


def _breakpoint_tokens(model: ChatModel, chat: ChatInput, index: int, text: str) -> int:
    """Prompt tokens up to the end of message `index`: render once more with a mark there;
    the text before the mark, when the real prompt starts with it, is tokenized."""
    message = chat.messages[index]
    marked = list(chat.messages)
    marked[index] = {**message, "content": (message.get("content") or "") + _MARK}
    marked_text = render_chat(model.template, dataclasses.replace(chat, messages=marked))
    cut = marked_text.find(_MARK)
    if cut < 0 or not text.startswith(marked_text[:cut]):
        return 0
    return len(tokenize_prompt(model.engine, marked_text[:cut]))


def cache_usage(prompt_tokens: int, cached_tokens: int, breakpoint_tokens: int) -> dict:
    """input_tokens + cache_read + cache_creation = the prompt."""
    cached = min(cached_tokens, prompt_tokens)
    created = max(0, min(breakpoint_tokens, prompt_tokens) - cached)
    return {"input_tokens": prompt_tokens - cached - created, "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": created}
