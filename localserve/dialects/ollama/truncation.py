"""Ollama's `truncate` and `shift` (both true unless the request says false), as Ollama's
server and runner apply them.

truncate: a /api/chat history whose prompt does not fit the context loses its oldest turns, as
Ollama's chatPrompt drops them; system messages and the last message always stay. A prompt
still too long (the last message alone, or /api/generate's one prompt) is cut when shift is on
too: its first num_keep tokens and the newest that leave about half the context for the answer
(llm/llama_server.go: contextShiftPromptLimit). With `truncate: false`, with `shift: false`, or
with images in the prompt, the answer is the 400 naming the sizes.

shift: an answer that reaches the context's end drops half of the tokens after the prompt's
first num_keep and goes on (runtime/context_shift.py); with `shift: false` it stops there
(`done_reason: "length"`). num_keep (default 4) counts after the BOS, as Ollama counts it.

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
                    truncate: bool, check_client: Callable[[], None], label: str,
                    cut_last: Callable[[list[Message]], GenerationRequest] | None = None) -> GenerationRequest:
    """build(messages), or with truncate, build() of the fewest oldest turns dropped that fits;
    when even the last message alone does not, cut_last() of it (None: ContextOverflow).
    check_client() between two builds: a client that left stops it."""
    try:
        return build(messages)
    except ContextOverflow:
        if not truncate:
            raise
        if len(messages) <= 1:
            if cut_last is None:
                raise
            return cut_last(messages)
    cuts = cut_points(messages)

    def kept(cut: int) -> list[Message]:
        return [m for m in messages[:cut] if m.role == "system"] + messages[cut:]

    check_client()
    try:
        fitting, high = build(kept(cuts[-1])), len(cuts) - 1      # the last message alone: else nothing fits
    except ContextOverflow:
        if cut_last is None:
            raise
        log.info("%s: the history dropped to its last message, and that cut to fit the context (truncate)",
                 label)
        return cut_last(kept(cuts[-1]))
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


def prompt_keep(num_keep: int, prompt_start: int) -> int | None:
    """The prompt tokens a context shift keeps: num_keep after the BOS (`prompt_start` tokens: 1
    for a model that adds one); None for -1, the whole prompt (known once it is tokenized)."""
    return None if num_keep < 0 else num_keep + prompt_start


def cut_to_fit(tokens: list[int], n_ctx: int, keep: int | None) -> list[int]:
    """A prompt longer than the context, cut as Ollama's runner cuts it: its first `keep` tokens
    (None: as many as fit) and the newest after them, leaving about half the context for the
    answer (at least one position)."""
    keep = min(len(tokens) if keep is None else keep, n_ctx - 1)
    limit = n_ctx - max((n_ctx - keep) // 2, 1)
    return tokens[:keep] + tokens[len(tokens) - (limit - keep):]
