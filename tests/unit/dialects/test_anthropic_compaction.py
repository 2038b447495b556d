"""Anthropic compaction read from the wire: the compact_20260112 edit (its trigger a share of the
model's context) and a compaction block sent back (what comes before it is left out; the
summary is the turn the rest starts from), rendered by every real chat template. The runs
themselves: tests/e2e/test_anthropic_compaction.py."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from template_corpus import corpus_names, corpus_templates  # noqa: E402

from localserve.conversation import Message, Text, ToolCall, text_message  # noqa: E402
from localserve.dialects.anthropic.compacting import compacted  # noqa: E402
from localserve.dialects.anthropic.compaction import (Compact, Compaction, default_trigger, min_trigger,  # noqa: E402
                                                      read_compact, with_iterations)
from localserve.dialects.anthropic.edits import read_edits  # noqa: E402
from localserve.dialects.anthropic.input import read_input  # noqa: E402
from localserve.errors import ApiError  # noqa: E402
from localserve.models.loaded import detect_chat_family  # noqa: E402
from localserve.prompt.build import render_chat  # noqa: E402
from localserve.prompt.compaction import summary_message  # noqa: E402
from localserve.prompt.templates import ChatTemplate  # noqa: E402

N_CTX = 8192
KEY = b"k" * 32
SUMMARY = "We looked at the clock twice."


def test_the_trigger_defaults_and_bounds_are_shares_of_the_context():
    assert read_compact({"type": "compact_20260112"}, "e", N_CTX) == Compact(default_trigger(N_CTX))
    assert (default_trigger(N_CTX), min_trigger(N_CTX)) == (6144, 2048)      # Anthropic's 150k and 50k of 200k
    edit = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 2048},
            "pause_after_compaction": True, "instructions": "Keep the file names."}
    assert read_compact(edit, "e", N_CTX) == Compact(2048, True, "Keep the file names.")
    with pytest.raises(ApiError) as info:
        read_compact({**edit, "trigger": {"type": "input_tokens", "value": 2047}}, "e", N_CTX)
    assert info.value.status == 400 and info.value.param == "e.trigger.value" and "2048" in info.value.message
    assert read_compact({**edit, "instructions": "  "}, "e", N_CTX).instructions is None   # blank: the server's prompt


def test_the_compact_edit_is_read_beside_the_others_once():
    edits = read_edits({"context_management": {"edits": [
        {"type": "clear_thinking_20251015"}, {"type": "compact_20260112"}, {"type": "compact_20260112"}]}}, N_CTX)
    assert [type(e).__name__ for e in edits] == ["ClearThinking", "Compact"]


def test_a_compaction_block_stands_for_everything_before_it():
    body = {"system": "Be brief.", "messages": [
        {"role": "user", "content": "What time is it?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "clock", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "12:00"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "left out"},
                                          {"type": "compaction", "content": SUMMARY, "cache_control": {"type": "ephemeral"}},
                                          {"type": "text", "text": "It is noon."}]},
        {"role": "user", "content": "Thanks."}]}
    read = read_input(body, KEY)
    assert read.chat.messages == [text_message("system", "Be brief."), summary_message(SUMMARY),
                                  Message("assistant", (Text("It is noon."),)), text_message("user", "Thanks.")]
    assert read.cache_breakpoint == 1            # the block's cache_control marks the summary's turn
    assert SUMMARY in read.chat.messages[1].text


def test_a_paused_turn_of_the_block_alone_leaves_the_summary_to_answer():
    body = {"messages": [{"role": "user", "content": "A long question."},
                         {"role": "assistant", "content": [{"type": "compaction", "content": SUMMARY}]}]}
    assert read_input(body, KEY).chat.messages == [summary_message(SUMMARY)]


def test_a_summary_may_open_a_user_turn_too():
    body = {"messages": [{"role": "user", "content": "Old."},
                         {"role": "user", "content": [{"type": "compaction", "content": SUMMARY},
                                                      {"type": "text", "text": "Go on."}]}]}
    # the user turn after the summary joins it, as consecutive user turns do
    assert read_input(body, KEY).chat.messages == [text_message("user", summary_message(SUMMARY).text + "\nGo on.")]


def test_the_last_summary_wins_and_a_failed_one_is_no_op():
    body = {"messages": [
        {"role": "assistant", "content": [{"type": "compaction", "content": "older"}]},
        {"role": "user", "content": "More."},
        {"role": "assistant", "content": [{"type": "compaction", "content": SUMMARY},
                                          {"type": "tool_use", "id": "toolu_2", "name": "clock", "input": {}},
                                          {"type": "compaction", "content": None}]}]}
    assert read_input(body, KEY).chat.messages == [
        summary_message(SUMMARY), Message("assistant", (Text(""), ToolCall("toolu_2", "clock", {})))]


def test_usage_iterations_leave_the_summary_out_of_the_top_level():
    compaction = Compaction(SUMMARY, {"input_tokens": 900, "output_tokens": 40})
    answer = {"input_tokens": 60, "output_tokens": 5}
    assert with_iterations(compaction, answer) == {
        "input_tokens": 60, "output_tokens": 5,
        "iterations": [{"type": "compaction", "input_tokens": 900, "output_tokens": 40},
                       {"type": "message", "input_tokens": 60, "output_tokens": 5}]}
    assert with_iterations(compaction, None)["output_tokens"] == 0


# ---- every real template renders what Anthropic compaction gives it ---------------------------

@pytest.mark.parametrize("name", corpus_names())
def test_every_real_template_renders_a_conversation_from_a_summary(name):
    """The compacted answer's prompt (system, the summary), and the next request's (the summary,
    the answer after the block, a new user turn)."""
    template = ChatTemplate(f"corpus:{name}", corpus_templates()[name], "<s>", "</s>")
    template = dataclasses.replace(template, calls_family=detect_chat_family(template))
    answered = read_input({"system": "Be brief.", "messages": [
        {"role": "user", "content": "Name a tea."},
        {"role": "assistant", "content": [{"type": "compaction", "content": SUMMARY},
                                          {"type": "text", "text": "Sencha."}]},
        {"role": "user", "content": "And a coffee?"}]}, KEY).chat
    prompt = render_chat(template, answered)
    assert SUMMARY in prompt and "Sencha." in prompt and "And a coffee?" in prompt and "Name a tea." not in prompt
    assert SUMMARY in render_chat(template, compacted(answered, SUMMARY))
