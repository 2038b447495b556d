"""Anthropic context edits cost at most a handful of prompt counts (issue 28, item 4): a cap on
their number, each distinct edit weighed once, a departed client stops them."""

from __future__ import annotations

import pytest

from localserve.conversation import Message, Text, ToolCall, ToolResult, text_message
from localserve.dialects.anthropic.edits import ClearToolUses, apply_edits, read_edits
from localserve.errors import ApiError, ClientGone
from localserve.dialects.limits import MAX_CONTEXT_EDITS

N_CTX = 4096      # the model's context, which only a compaction's trigger reads

# never clears enough: each copy once cost a whole render and tokenize
STUBBORN = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 0},
            "keep": {"type": "tool_uses", "value": 0}, "clear_at_least": {"type": "input_tokens", "value": 10**9}}


def tool_history(uses: int) -> list[Message]:
    messages = [text_message("user", "go")]
    for n in range(uses):
        messages.append(Message("assistant", (Text(""), ToolCall(f"toolu_{n}", "get_time", {}))))
        messages.append(Message("tool", (ToolResult(f"toolu_{n}", "12:00 " * 50),)))
    return messages


def counter():
    calls = []

    def count(messages: list[Message]) -> int:
        calls.append(1)
        return sum(len(m.text) + sum(len(str(r.content)) for r in m.of(ToolResult)) for m in messages)
    return count, calls


def test_more_edits_than_the_cap_is_400_naming_it():
    with pytest.raises(ApiError) as info:
        read_edits({"context_management": {"edits": [STUBBORN] * (MAX_CONTEXT_EDITS + 1)}}, N_CTX)
    assert info.value.status == 400 and info.value.param == "context_management.edits"
    assert "MAX_CONTEXT_EDITS" in info.value.message


def test_copies_of_an_edit_are_weighed_once():
    edits = read_edits({"context_management": {"edits": [STUBBORN] * MAX_CONTEXT_EDITS}}, N_CTX)
    assert len(edits) == 1 and isinstance(edits[0], ClearToolUses)
    count, calls = counter()
    result = apply_edits(edits, tool_history(5), count)
    assert result.applied == [] and len(calls) == 2           # the prompt before, and with the edit


def test_distinct_edits_are_each_kept_in_order():
    other = {**STUBBORN, "keep": {"type": "tool_uses", "value": 1}}
    edits = read_edits({"context_management": {"edits": [STUBBORN, other, STUBBORN,
                                                         {"type": "clear_thinking_20251015"}]}}, N_CTX)
    assert [type(e).__name__ for e in edits] == ["ClearToolUses", "ClearToolUses", "ClearThinking"]
    assert edits[1].keep == 1


def test_a_departed_client_stops_the_edits():
    edits = read_edits({"context_management": {"edits": [
        {**STUBBORN, "keep": {"type": "tool_uses", "value": n}} for n in range(MAX_CONTEXT_EDITS)]}}, N_CTX)
    count, calls = counter()
    checks = []

    def check_client():
        checks.append(1)
        if len(checks) > 1:
            raise ClientGone()

    with pytest.raises(ClientGone):
        apply_edits(edits, tool_history(10), count, check_client)
    assert len(calls) == 2                                     # the first edit only
