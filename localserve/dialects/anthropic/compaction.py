"""Anthropic's server-side compaction (`compact_20260112`, beta `compact-2026-01-12`) on the wire.

- The edit, in `context_management.edits`: `trigger` ({"type": "input_tokens", "value": N}: the
  prompt tokens past which the conversation is compacted before the model answers),
  `pause_after_compaction` (stop after the summary, stop_reason "compaction", so the client can
  add to it before the model goes on), `instructions` (replace the summarisation prompt).
  Anthropic's trigger defaults to 150,000 tokens and may not be under 50,000, on a 200,000-token
  context; a local model's context is a few thousand, so both are shares of the model's context.
- The top-level `compaction` parameter ({"type": "summarize", "instructions"?}): the request
  only compacts, whatever its prompt's size, and the answer is the block alone (as a paused
  compaction's); count_tokens ignores it; with context_management it is a 400.
- The `compaction` block a client sends back (first in an assistant turn, as this server wrote
  it, or in a user turn): everything before it is left out, and its summary is shown to the
  model as a user turn (prompt/compaction.py's summary_message, as for every dialect), so the
  prompt starts from a short prefix the prompt cache keeps. A block whose content is null (a
  compaction that failed) changes nothing; an empty summary is a 400.
- The block in an answer: first in `content`, `{"type": "compaction", "content": summary}`; in a
  stream its own content_block_start, one `compaction_delta` with the whole summary, and
  content_block_stop (the SDK takes the delta's content as the block's, not a fragment of it).
- Usage: the summary's generation is its own `usage.iterations` entry ({"type": "compaction"}),
  the answer's a {"type": "message"} one; the top-level fields count the answer alone, as
  Anthropic's do. `applied_edits` lists the clearing edits only: Anthropic's response types have
  no compaction entry there (a strict SDK refuses one), the block itself says it happened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...conversation import Message
from ...prompt.compaction import SUMMARY_HEADING
from ..fields import invalid
from ..pump import sse

COMPACT = "compact_20260112"
DEFAULT_TRIGGER_SHARE = 0.75    # of the model's context: Anthropic's 150,000 of 200,000
MIN_TRIGGER_SHARE = 0.25        # its minimum, 50,000 of 200,000


@dataclass(frozen=True)
class Compact:
    """A compact_20260112 edit, read."""
    trigger: int                      # prompt tokens past which the conversation is compacted
    pause: bool = False               # pause_after_compaction
    instructions: str | None = None   # replace the summarisation prompt


def default_trigger(n_ctx: int) -> int:
    return int(n_ctx * DEFAULT_TRIGGER_SHARE)


def min_trigger(n_ctx: int) -> int:
    return int(n_ctx * MIN_TRIGGER_SHARE)


def read_compact(edit: dict, where: str, n_ctx: int) -> Compact:
    """One compact_20260112 edit; n_ctx: the model's context (per sequence), which the
    trigger's default and minimum are shares of."""
    trigger = edit.get("trigger")
    tokens = default_trigger(n_ctx)
    if trigger is not None:
        value = trigger.get("value") if isinstance(trigger, dict) else None
        if (not isinstance(trigger, dict) or trigger.get("type") != "input_tokens"
                or isinstance(value, bool) or not isinstance(value, int)):
            raise invalid(f"{where}.trigger", 'expected {"type": "input_tokens", "value": N} with N an integer')
        if value < min_trigger(n_ctx):
            raise invalid(f"{where}.trigger.value",
                          f"must be at least {min_trigger(n_ctx)} (a quarter of this model's context of "
                          f"{n_ctx} tokens), got {value}")
        tokens = value
    pause = edit.get("pause_after_compaction")
    if pause is not None and not isinstance(pause, bool):
        raise invalid(f"{where}.pause_after_compaction", "expected a boolean")
    return Compact(tokens, bool(pause), _instructions(edit, f"{where}.instructions"))


def read_summarize(body: dict) -> Compact | None:
    """The top-level `compaction` parameter, as a compaction due at once that pauses after it."""
    value = body.get("compaction")
    if value is None:
        return None
    if not isinstance(value, dict) or value.get("type") != "summarize":
        raise invalid("compaction", 'expected {"type": "summarize", "instructions": "..."?}')
    if body.get("context_management") is not None:
        raise invalid("compaction", "cannot be combined with context_management")
    return Compact(0, True, _instructions(value, "compaction.instructions"))


def _instructions(edit: dict, where: str) -> str | None:
    """Instructions that replace the summarisation prompt; blank ones count as none."""
    instructions = edit.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid(where, "expected a string")
    return instructions if instructions and instructions.strip() else None


# ---- compaction blocks sent back ------------------------------------------------------------

@dataclass(frozen=True)
class Cut:
    """Where the conversation starts again: the last compaction block's summary, in
    messages[message] at content[block]."""
    message: int
    block: int
    summary: str
    marked: bool                      # the block carries a cache_control breakpoint


def find_cut(messages: list) -> Cut | None:
    """The last compaction block with a summary, in an assistant turn (where this server answers
    it) or a user turn; the blocks before it are never read (what a client sends back there is
    left out, checked or not)."""
    for i in reversed(range(len(messages))):
        message = messages[i]
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or message.get("role") not in ("assistant", "user"):
            continue
        for j in reversed(range(len(content))):
            block = content[j]
            if isinstance(block, dict) and block.get("type") == "compaction":
                summary = read_summary(block, f"messages[{i}].content[{j}]")
                if summary is not None:
                    return Cut(i, j, summary, block.get("cache_control") is not None)
    return None


def read_summary(block: dict, where: str) -> str | None:
    """A compaction block's summary; None for a failed compaction's (content null), which
    changes nothing."""
    content = block.get("content")
    if content is None:
        return None
    if not isinstance(content, str) or not content:
        raise invalid(f"{where}.content", "expected the summary this server wrote (a non-empty string), or null")
    return content


def is_summary(message: Message) -> bool:
    """A turn that shows a summary sent back (summary_message), with what a user added to it."""
    return message.role == "user" and message.text.startswith(SUMMARY_HEADING)


# ---- the block in an answer ----------------------------------------------------------------

def compaction_block(summary: str) -> dict:
    return {"type": "compaction", "content": summary}


def compaction_events(index: int, summary: str) -> list[bytes]:
    """A compaction block in a stream: the summary in one delta."""
    return [sse({"type": "content_block_start", "index": index, "content_block": {"type": "compaction"}},
                "content_block_start"),
            sse({"type": "content_block_delta", "index": index,
                 "delta": {"type": "compaction_delta", "content": summary}}, "content_block_delta"),
            sse({"type": "content_block_stop", "index": index}, "content_block_stop")]


@dataclass
class Compaction:
    """A compaction this request ran: the summary the model wrote, and its generation's usage
    (a usage dict as MessageMeta.usage makes it)."""
    summary: str
    usage: dict


def with_iterations(compaction: Compaction, message: dict | None) -> dict[str, Any]:
    """A message's usage with usage.iterations: the summary's generation, then the answer's.
    The top-level fields are the answer's alone (zero when paused after the summary)."""
    top = message or {"input_tokens": 0, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
                      "output_tokens": 0}
    steps: list[dict[str, Any]] = [{"type": "compaction", **compaction.usage}]
    if message is not None:
        steps.append({"type": "message", **message})
    return {**top, "iterations": steps}
