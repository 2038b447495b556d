"""Anthropic context editing (`context_management.edits`), applied to the rendered history.

The client keeps its whole history and sends it every turn; the server leaves parts of
it out of the prompt, oldest first, and says what it left out in
`context_management.applied_edits`:
- clear_thinking_20251015: the reasoning of all but the last `keep` assistant turns
  that have some (`keep`: {"type": "thinking_turns", "value": N}, default 1, or "all" /
  {"type": "all"}: nothing is cleared, so the cached prefix stays whole);
- clear_tool_uses_20250919: once `trigger` is passed (prompt tokens, default 100000, or
  tool uses), every tool result but the last `keep` tool uses (default 3) becomes a
  placeholder, and with `clear_tool_inputs` (true, or a list of tool names) the call's
  input too; tools in `exclude_tools` are never cleared; when `clear_at_least` tokens
  would not be freed, nothing is;
- compact_20260112 (compaction.py): read here, but applied after the others by the handler,
  since it takes a generation (the model writes the summary); at most one per request.
Edits work on the conversation read (localserve/conversation.py), in the order given; each applied
edit reports the tokens it freed, counted on the prompt before and after it. Edit types
this server does not know are skipped, never an error. Weighing an edit can cost a render
and a tokenize of the whole prompt, so a request carries at most MAX_CONTEXT_EDITS of them
(400 beyond), an edit given twice is weighed once (its copy could clear nothing it did not),
and a client that leaves stops the edits between two of them.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Union

from ...conversation import Message, Part, Reasoning, ToolCall, ToolResult
from ..limits import MAX_CONTEXT_EDITS
from ..fields import invalid
from .compaction import COMPACT, Compact, read_compact

log = logging.getLogger("localserve.anthropic")

CLEAR_THINKING = "clear_thinking_20251015"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
CLEARED_RESULT = "[This tool result was cleared to save context.]"
CLEARED_INPUT: dict = {}     # a cleared call's input: no arguments
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_KEEP_THINKING_TURNS = 1


@dataclass
class ClearThinking:
    keep: int | None = DEFAULT_KEEP_THINKING_TURNS      # None: keep all


@dataclass
class ClearToolUses:
    trigger: tuple[str, int] = ("input_tokens", DEFAULT_TRIGGER_TOKENS)
    keep: int = DEFAULT_KEEP_TOOL_USES
    clear_at_least: int = 0
    exclude: frozenset[str] = frozenset()
    clear_inputs: bool | frozenset[str] = False


Edit = Union[ClearThinking, ClearToolUses, Compact]


@dataclass
class EditResult:
    messages: list[Message]
    applied: list[dict] = field(default_factory=list)
    original_tokens: int | None = None       # the prompt before any edit, when it was counted


# ---- reading ------------------------------------------------------------------------

def read_edits(body: dict, n_ctx: int) -> list[Edit] | None:
    """The edits asked for; None when the request has no context_management. n_ctx: the
    model's context, which a compaction's trigger is measured against."""
    value = body.get("context_management")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid("context_management", "expected an object")
    edits = value.get("edits")
    if edits is None:
        return []
    if not isinstance(edits, list):
        raise invalid("context_management.edits", "expected an array")
    if len(edits) > MAX_CONTEXT_EDITS:
        raise invalid("context_management.edits", f"at most {MAX_CONTEXT_EDITS} edits are taken (MAX_CONTEXT_EDITS), "
                                                   f"this request has {len(edits)}")
    found: list[Edit] = []
    for i, edit in enumerate(edits):
        where = f"context_management.edits[{i}]"
        if not isinstance(edit, dict) or not isinstance(edit.get("type"), str):
            raise invalid(where, "expected an object with a 'type'")
        if edit["type"] == CLEAR_THINKING:
            found.append(ClearThinking(_thinking_keep(edit.get("keep"), f"{where}.keep")))
        elif edit["type"] == CLEAR_TOOL_USES:
            found.append(_tool_uses_edit(edit, where))
        elif edit["type"] == COMPACT:
            found.append(read_compact(edit, where, n_ctx))
        else:
            log.info("context edit %r is not supported here; skipped", edit["type"])
    distinct = [edit for i, edit in enumerate(found) if edit not in found[:i]]    # each distinct edit once
    if sum(isinstance(edit, Compact) for edit in distinct) > 1:
        raise invalid("context_management.edits", f"at most one {COMPACT} edit is taken")
    return distinct


def compact_edit(edits: list[Edit] | None) -> Compact | None:
    return next((edit for edit in edits or () if isinstance(edit, Compact)), None)


def _thinking_keep(value: Any, where: str) -> int | None:
    if value is None:
        return DEFAULT_KEEP_THINKING_TURNS
    if value == "all" or (isinstance(value, dict) and value.get("type") == "all"):
        return None
    return _counted(value, where, "thinking_turns")


def _tool_uses_edit(edit: dict, where: str) -> ClearToolUses:
    result = ClearToolUses()
    trigger = edit.get("trigger")
    if trigger is not None:
        kind = trigger.get("type") if isinstance(trigger, dict) else None
        if kind not in ("input_tokens", "tool_uses"):
            raise invalid(f"{where}.trigger", 'expected {"type": "input_tokens" | "tool_uses", "value": N}')
        result.trigger = (kind, _counted(trigger, f"{where}.trigger", kind))
    if edit.get("keep") is not None:
        result.keep = _counted(edit["keep"], f"{where}.keep", "tool_uses")
    if edit.get("clear_at_least") is not None:
        result.clear_at_least = _counted(edit["clear_at_least"], f"{where}.clear_at_least", "input_tokens")
    result.exclude = frozenset(_names(edit.get("exclude_tools"), f"{where}.exclude_tools"))
    inputs = edit.get("clear_tool_inputs")
    if isinstance(inputs, bool):
        result.clear_inputs = inputs
    elif inputs is not None:
        result.clear_inputs = frozenset(_names(inputs, f"{where}.clear_tool_inputs"))
    return result


def _counted(value: Any, where: str, kind: str) -> int:
    """{"type": kind, "value": N} → N."""
    number = value.get("value") if isinstance(value, dict) else None
    if (not isinstance(value, dict) or value.get("type") != kind or isinstance(number, bool)
            or not isinstance(number, int) or number < 0):
        raise invalid(where, f'expected {{"type": "{kind}", "value": N}} with N a non-negative integer')
    return number


def _names(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(n, str) for n in value):
        raise invalid(where, "expected an array of tool names")
    return value


# ---- applying -----------------------------------------------------------------------

def apply_edits(edits: list[Edit], messages: list[Message], count: Callable[[list[Message]], int],
                check_client: Callable[[], None] = lambda: None) -> EditResult:
    """`messages` with the edits applied (the input is not changed); `count` gives the
    prompt tokens of a message list and is called only when an edit has something to clear;
    check_client raises when the client has left."""
    result = EditResult(messages)
    tokens: int | None = None
    for edit in edits:
        check_client()
        if isinstance(edit, Compact):      # the handler's, once the others are applied
            continue
        if isinstance(edit, ClearThinking):
            candidate, cleared = _clear_thinking(result.messages, edit)
        else:
            if edit.trigger[0] == "input_tokens":
                if tokens is None:
                    tokens = result.original_tokens = count(result.messages)
                if tokens <= edit.trigger[1]:
                    continue
            elif _tool_use_count(result.messages) <= edit.trigger[1]:
                continue
            candidate, cleared = _clear_tool_uses(result.messages, edit)
        if not cleared:
            continue
        if tokens is None:
            tokens = result.original_tokens = count(result.messages)
        after = count(candidate)
        freed = max(0, tokens - after)
        if isinstance(edit, ClearToolUses) and freed < edit.clear_at_least:
            continue
        result.messages, tokens = candidate, after
        if isinstance(edit, ClearThinking):
            result.applied.append({"type": CLEAR_THINKING, "cleared_thinking_turns": cleared,
                                   "cleared_input_tokens": freed})
        else:
            result.applied.append({"type": CLEAR_TOOL_USES, "cleared_tool_uses": cleared,
                                   "cleared_input_tokens": freed})
    return result


def _clear_thinking(messages: list[Message], edit: ClearThinking) -> tuple[list[Message], int]:
    turns = [i for i, m in enumerate(messages)
             if m.role == "assistant" and "\n".join(r.text for r in m.of(Reasoning))]
    if edit.keep is None or len(turns) <= edit.keep:
        return messages, 0
    clear = set(turns[:len(turns) - edit.keep])
    edited = [Message(m.role, tuple(p for p in m.parts if not isinstance(p, Reasoning)), m.name) if i in clear else m
              for i, m in enumerate(messages)]
    return edited, len(clear)


def _tool_use_count(messages: list[Message]) -> int:
    return sum(len(m.of(ToolCall)) for m in messages if m.role == "assistant")


def _clear_tool_uses(messages: list[Message], edit: ClearToolUses) -> tuple[list[Message], int]:
    """Every tool use but the last `keep` (and the excluded tools): its result becomes a
    placeholder, and its input too where clear_inputs says so."""
    uses = [call for m in messages if m.role == "assistant" for call in m.of(ToolCall)]
    older = uses[:max(0, len(uses) - edit.keep)]
    clear_ids = {call.id: call.name for call in older if call.name not in edit.exclude}
    if not clear_ids:
        return messages, 0

    def clears_input(name: str) -> bool:
        return edit.clear_inputs is True or (isinstance(edit.clear_inputs, frozenset) and name in edit.clear_inputs)

    def cleared_part(part: Part) -> Part:
        if isinstance(part, ToolResult) and part.call_id in clear_ids:
            if part.content != CLEARED_RESULT or part.is_error:
                cleared.add(part.call_id)
            return dataclasses.replace(part, content=CLEARED_RESULT, is_error=False)
        if (isinstance(part, ToolCall) and part.id in clear_ids and clears_input(part.name)
                and part.arguments != CLEARED_INPUT):
            cleared.add(part.id)
            return dataclasses.replace(part, arguments=dict(CLEARED_INPUT), text=None)
        return part

    edited: list[Message] = []
    cleared: set[str] = set()
    for m in messages:
        parts = tuple(cleared_part(p) for p in m.parts)
        edited.append(m if parts == m.parts else dataclasses.replace(m, parts=parts))
    return edited, len(cleared)
