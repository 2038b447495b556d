"""Waking a strict tool call's grammar where the model opens a call on its own.

A request whose strict tools the model may call when it likes (tool_choice auto) carries a
call grammar that sleeps (engine/call_grammar.py). After each token the runtime asks the text
pipeline whether a block of calls has opened (the family's start marker, or a `{` opening the
message for the families that write bare objects); the first time one has, the grammar wakes
with the block's text so far, as the model's own tokens, and holds every token after it. No
token chosen before the wake is chosen again: a draft being verified stops at the token that
opened the call, and the rest is chosen under the grammar (sampling.py). A block whose text
already strays from the grammar (the token that completed the marker ran on past what it
allows) is left as the model writes it; the grammar sleeps on for a later block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from .jobs import Job

log = logging.getLogger("localserve.runtime")


def wake_at_open_call(job: Job, piece: Callable[[int], bytes]) -> None:
    """Wake the job's call grammar if the token just taken opened a block of tool calls."""
    if not job.sampler.grammar_asleep:
        return
    opened = job.pipeline.open_call()
    if opened is None or opened[0] == job.call_refused:
        return
    number, text = opened
    split = split_call(text.encode("utf-8"), job.generated, piece)
    if split is None or not job.sampler.wake(*split):
        job.call_refused = number
        log.info("job %s (%s): a tool call opened as %r, which its grammar does not allow; "
                 "the call is left as written", job.gen.id, job.request.label, text[:80])


def split_call(call: bytes, generated: Sequence[int],
               piece: Callable[[int], bytes]) -> tuple[bytes, list[int]] | None:
    """The call's text so far as (the tail of the token it began inside, the whole tokens after
    it), read back from the end of the output; None if the output does not end with that text
    (a byte the decoder replaced)."""
    tokens: list[int] = []
    covered = b""
    for token in reversed(generated):
        if len(covered) >= len(call):
            break
        covered = piece(token) + covered
        tokens.append(token)
    if not covered.endswith(call):
        return None
    tokens.reverse()
    cut = len(covered) - len(call)        # bytes of the first token before the call began
    if cut == 0:
        return b"", tokens
    return piece(tokens[0])[cut:], tokens[1:]
