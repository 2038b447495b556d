"""Waking a strict tool call's grammar where the model opens a call on its own.

A request whose strict tools the model may call when it likes (tool_choice auto) carries a
call grammar that sleeps (engine/lazy_grammar.py). After each token the runtime asks the text
pipeline whether a block of calls has opened (the family's start marker, or a `{` opening the
message for the families that write bare objects); the first time one has, the grammar wakes
with the block's text so far, as the model's own tokens, and holds every token after it. No
token chosen before the wake is chosen again: a draft being verified stops at the token that
opened the call, and the rest is chosen under the grammar (token_choice.py). A block whose text
already strays from the grammar (the token that completed the marker ran on past what it
allows) is left as the model writes it; the grammar sleeps on for a later block.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence

from ..generation import Chunk
from ..parsing.call_format import CallFormat
from ..parsing.tool_families import ToolSyntax
from ..parsing.tools import ToolProjector
from .jobs import Job

log = logging.getLogger("localserve.runtime")


def wake_at_open_call(job: Job, piece: Callable[[int], bytes]) -> int | None:
    """Wake the job's call grammar if the token just taken opened a block of tool calls; the
    block's number when its text strays from the grammar (the job records it: take_token.py)."""
    if not job.sampler.grammar_asleep:
        return None
    opened = job.pipeline.open_call()
    if opened is None or opened.number == job.call_refused:
        return None
    texts = [opened.text]
    if grammar_follows(job.request.tools.syntax, opened.marker):
        texts.append(opened.text[len(opened.marker):])
    for text in texts:
        split = split_call(text.encode("utf-8"), job.generated, piece)
        if split is not None and job.sampler.wake(*split):
            return None
    log.info("job %s (%s): a tool call opened as %r, which its grammar does not allow; "
             "the call is left as written", job.gen.id, job.request.label, opened.text[:80])
    return opened.number


@functools.lru_cache(maxsize=64)
def grammar_follows(syntax: ToolSyntax, marker: str) -> bool:
    """Whether calls as the family's grammar writes them may follow `marker` even where the
    grammar itself does not write it (Llama 3's <|python_tag|>, GPT-OSS's <|start|>assistant):
    then a block that marker opened is taken from the grammar's start, after the marker.
    Not so for every marker (Qwen3-Coder's bare <function= cannot be followed by <tool_call>)."""
    shape = syntax.grammar
    if isinstance(shape, CallFormat):
        return False      # a derived format's grammar writes the block's opening, its marker first
    call = shape.before.format(name="f", jname='"f"') + ("" if shape.parameters else "{}") + shape.after
    projector = ToolProjector(syntax, {"f": None})
    events = projector.feed(marker + shape.opening + call + shape.closing) + projector.finish()
    return len(projector.calls) == 1 and not any(isinstance(event, Chunk) for event in events)


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
