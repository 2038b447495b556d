"""Context compaction in the Responses API (docs/compaction.rst).

- A `compaction` item carries a summary sealed in `encrypted_content`; as input (anywhere) it is
  opened and renders as the summary (prompt/compaction.summary_message). In a stored chain
  (previous_response_id, a conversation) the turns before the last compaction are left out:
  the compaction stands for them, so the next turn starts from a short prefix and does not
  compact again.
- A `compaction_trigger` input item makes the response a compaction: its one output item is
  the `compaction` (Codex's remote compaction).
- `context_management: [{"type": "compaction", "compact_threshold": N}]` compacts before the
  model runs when the rendered input passes N tokens (or does not fit the context at all);
  `truncation: "auto"` compacts, when the input does not fit, instead of dropping turns
  (dropping them only when even the summary cannot be written). Then the output opens with
  the compaction item and the model answers from the summary and this request's own input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...conversation import Message
from ...errors import ApiError
from ...store.store import new_id
from ..compaction import open_summary, seal_summary
from ..fields import invalid

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.served import ServedModel

COMPACTION_ITEM_PREFIX = "cmp"
KEPT_USER_SHARE_OF_CONTEXT = 4      # /v1/responses/compact keeps user messages of at most n_ctx // this tokens


@dataclass
class ContextManagement:
    compact_threshold: int | None = None      # tokens of rendered input past which the input is compacted


def read_context_management(body: dict) -> ContextManagement:
    value = body.get("context_management")
    if value is None:
        return ContextManagement()
    if not isinstance(value, list):
        raise invalid("context_management", "expected an array of context management entries")
    threshold = None
    for i, entry in enumerate(value):
        where = f"context_management[{i}]"
        if not isinstance(entry, dict) or entry.get("type") != "compaction":
            raise invalid(f"{where}.type", "the one context management entry type is 'compaction'")
        raw = entry.get("compact_threshold")
        if raw is not None and (isinstance(raw, bool) or not isinstance(raw, int) or raw < 1):
            raise invalid(f"{where}.compact_threshold", "expected a positive integer (tokens)")
        threshold = raw if raw is not None else 0     # 0: compact only when the input does not fit
    return ContextManagement(threshold)


def split_trigger(items: list[dict]) -> tuple[list[dict], bool]:
    """The input without its compaction_trigger items (as stored), and whether there was one.
    The input renders as read, its triggers in their places (to_messages skips them), so that
    `input[i]` names the same item when read and when rendered: in an error, and as the key of
    an image decoded once."""
    kept = [item for item in items if item["type"] != "compaction_trigger"]
    return kept, len(kept) != len(items)


def since_last_compaction(items: list[dict]) -> list[dict]:
    """A stored chain from its last compaction on (the compaction stands for what came before)."""
    for i in range(len(items) - 1, -1, -1):
        if items[i]["type"] == "compaction":
            return items[i:]
    return items


def open_compactions(key: bytes, items: list[dict], param: str) -> list[dict]:
    """Items to render: each compaction item with the summary it seals ("summary"); a blob this
    server did not seal, or that was altered, is a 400."""
    out = []
    for i, item in enumerate(items):
        if item["type"] == "compaction":
            where = f"{param}[{i}].encrypted_content" if param == "input" else param
            item = {**item, "summary": open_summary(key, item["encrypted_content"], where)}
        out.append(item)
    return out


def compaction_item(key: bytes, summary: str) -> dict:
    """A new compaction output item (as the client gets it: the summary sealed)."""
    return {"id": new_id(COMPACTION_ITEM_PREFIX), "type": "compaction", "encrypted_content": seal_summary(key, summary)}


def opened(item: dict, summary: str) -> dict:
    return {**item, "summary": summary}


def kept_user_items(model: ServedModel, items: list[dict]) -> list[dict]:
    """What /v1/responses/compact keeps besides the compaction: the user messages, newest first
    while they fit a quarter of the context, in their order."""
    budget = model.chat.engine.n_ctx // KEPT_USER_SHARE_OF_CONTEXT
    kept: list[dict] = []
    for item in reversed(items):
        if item["type"] != "message" or item["role"] != "user":
            continue
        text = "\n".join(part.get("text", "") for part in item["content"])
        cost = len(model.chat.engine.tokenize(text, add_special=False, parse_special=False))
        if cost > budget:
            break
        budget -= cost
        kept.append(item)
    return kept[::-1]


def check_conversation(messages: list[Message]) -> None:
    if not messages:
        raise ApiError(400, "invalid 'input': there is nothing to compact", param="input", code="invalid_value")
