"""Ollama's `truncate` on /api/chat (true unless the request says false): a history whose
prompt does not fit the context loses its oldest turns, as Ollama's chatPrompt drops them;
system messages and the last message always stay. With `truncate: false`, or when even the
last message alone does not fit, the answer is the 400 naming the sizes.

The prompt grows with what is kept, so the longest tail that fits is found by a binary
search over the places the history may start (at a user turn, or the last message): a few
renders, log2 of the turns, not one per turn.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ...conversation import Message
from ...generation import ContextOverflow, GenerationRequest

log = logging.getLogger("localserve.dialects")


def newest_that_fit(messages: list[Message], build: Callable[[list[Message]], GenerationRequest],
                    truncate: bool, check_client: Callable[[], None], label: str) -> GenerationRequest:
    """build(messages), or with truncate, build() of the fewest oldest turns dropped that fits;
    ContextOverflow when nothing fits. check_client() between two builds: a client that left stops it."""
    try:
        return build(messages)
    except ContextOverflow:
        if not truncate or len(messages) <= 1:
            raise
    cuts = cut_points(messages)

    def kept(cut: int) -> list[Message]:
        return [m for m in messages[:cut] if m.role == "system"] + messages[cut:]

    check_client()
    fitting, high = build(kept(cuts[-1])), len(cuts) - 1      # the last message alone: else nothing fits
    low = 0                                     # cuts[high] fits; every cut before low does not
    while low < high:
        middle = (low + high) // 2
        check_client()
        try:
            attempt = build(kept(cuts[middle]))
        except ContextOverflow:
            low = middle + 1
        else:
            high, fitting = middle, attempt
    log.info("%s: the first %d of %d messages dropped to fit the context (truncate)", label,
             len(messages) - len(kept(cuts[high])), len(messages))
    return fitting


def cut_points(messages: list[Message]) -> list[int]:
    """Where the kept history may start, oldest first: at each later user turn (a turn begins
    there), and at the last message, which always stays."""
    last = len(messages) - 1
    return [i for i in range(1, last) if messages[i].role == "user"] + [last]
