"""How far a conversation is rendered before it is refused.

Rendering is linear in a conversation's messages and text: 200,000 messages (a 7 MB body) took
3.5-5 s of the connection thread's CPU to reach a context-length 400 that was certain before
the template ran. A RenderLimit stops the work where the answer is known:

- Turns. A turn is a user or assistant message after one of the other role (or the first of
  either). Every template of llama.cpp's corpus shows each turn with a marker of its own (a
  role header, a special token), empty content included (tests/unit/prompt/test_room.py
  checks it on each one), so a turn is at least one prompt token: a conversation of as many
  turns as the context holds tokens cannot fit, and is refused before the template runs.
  System and tool messages are not counted (templates drop, merge or fold them), nor a run of
  one role (render_chat joins user turns in a row for templates that refuse them).
- Text. A token covers at most max_piece_bytes bytes, and a character is at least a byte: a
  render longer than n_ctx × max_piece_bytes characters cannot fit. The render stops there.

A prompt that is only counted or shown, or that may still be shortened (a compaction, context
edits), is not refused for the context: its render stops past MAX_TOKENIZE_BYTES, the most text
that is tokenized at once, with the refusal that text would get when tokenized.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from ..generation import ContextOverflow, PromptRefused

MAX_TOKENIZE_BYTES = 4 * 1024 * 1024   # /tokenize and count_tokens: the longest text they take
TURN_ROLES = ("user", "assistant")


@dataclass(frozen=True)
class RenderLimit:
    max_chars: int                  # a render longer than this is refused (render stops there)
    n_ctx: int | None = None        # refusals are ContextOverflow for this context; None: too long to count
    max_piece_bytes: int = 1

    @classmethod
    def to_fit(cls, n_ctx: int, max_piece_bytes: int) -> RenderLimit:
        """For a prompt that must fit a context of n_ctx tokens."""
        piece = max(1, max_piece_bytes)
        return cls(n_ctx * piece, n_ctx, piece)

    @classmethod
    def to_count(cls) -> RenderLimit:
        """For a prompt counted or shown whatever its length, as far as it is tokenized at all."""
        return cls(MAX_TOKENIZE_BYTES)

    def check_turns(self, roles: Iterable[Any]) -> None:
        """ContextOverflow, before any render, for a conversation with more turns than fit
        (its messages' roles: Message.role, or sent_roles of a body not read yet)."""
        if self.n_ctx is not None:
            n = turns(roles)
            if n >= self.n_ctx:
                raise ContextOverflow(n, self.n_ctx, at_least=True)

    def refusal(self, chars: int) -> Exception:
        """What a render that passed max_chars (at `chars` characters) is refused with."""
        if self.n_ctx is not None:
            return ContextOverflow(chars // self.max_piece_bytes, self.n_ctx, at_least=True)
        return PromptRefused(f"invalid 'messages': at most {MAX_TOKENIZE_BYTES} bytes of text are tokenized at "
                             f"once, the prompt is longer", param="messages", code="text_too_long")


def turns(roles: Iterable[Any]) -> int:
    """The turns of a conversation, from its messages' roles: user and assistant messages, a run
    of one role counted once."""
    count, last = 0, None
    for role in roles:
        if role != last and role in TURN_ROLES:
            count, last = count + 1, role
    return count


def sent_roles(messages: Any) -> Iterator[Any]:
    """The roles of a body's messages as sent, before they are read: reading 200,000 messages
    into the conversation is itself a second of CPU, and a count of their turns can refuse them
    first. Whatever is not a message has no role here (reading it is the 400 it gets)."""
    if isinstance(messages, list):
        for message in messages:
            yield message.get("role") if isinstance(message, dict) else None
