"""The summarisation prompt's pieces (prompt/compaction.py): where a head may end, what replaces it,
the request's last line, the room a summary gets."""

from __future__ import annotations

from localserve.conversation import Message, ToolCall, ToolResult, text_message
import sys

from localserve.prompt.compaction import (COUNT_SLICE_CHARS, SUMMARY_HEADING, SUMMARY_PROMPT, SUMMARY_REQUEST_END,
                                          count_tokens, fewest_jobs, head_cuts, join_user_turn, replace_head,
                                          summary_request_text, summary_room)


def conversation() -> list[Message]:
    return [text_message("system", "Be brief."), text_message("user", "one"), text_message("assistant", "two"),
            Message("assistant", (ToolCall("c1", "ls", {}),)), Message("tool", (ToolResult("c1", "a b"),)),
            text_message("assistant", "three"), text_message("user", "four")]


def test_a_head_ends_before_a_user_or_assistant_turn_and_covers_two_turns_at_least():
    messages = conversation()
    cuts = head_cuts(messages)
    assert cuts == [3, 5, 6]                     # never before the tool result (index 4), never at 2
    assert all(messages[i].role != "tool" for i in cuts)
    assert head_cuts(messages[:3]) == []          # system, user, assistant: nothing to split


def test_the_head_is_replaced_by_its_summary_after_the_system_turns():
    messages = conversation()
    rest = replace_head(messages, 5, "S")
    assert [m.role for m in rest] == ["system", "user", "assistant", "user"]
    assert rest[1].text == f"{SUMMARY_HEADING}\n\nS" and rest[2:] == messages[5:]
    assert len(rest) < len(messages)


def test_the_request_ends_with_its_fixed_line_whatever_the_instructions():
    assert summary_request_text().startswith(SUMMARY_PROMPT)
    assert summary_request_text("Only the files.").endswith(SUMMARY_REQUEST_END)
    assert SUMMARY_PROMPT not in summary_request_text("Only the files.")


def test_a_summary_takes_at_most_a_quarter_of_the_context():
    assert summary_room(8192, 1024) == 1024
    assert summary_room(2048, 1024) == 512
    assert summary_room(2, 1024) == 1


def test_a_summary_or_its_request_never_makes_two_user_turns_in_a_row():
    messages = [text_message("system", "Be brief."), text_message("user", "one"), text_message("assistant", "two"),
                text_message("user", "three"), text_message("assistant", "four"), text_message("user", "five")]
    rest = replace_head(messages, 3, "S")       # the head ends before "three": the summary joins it
    assert [m.role for m in rest] == ["system", "user", "assistant", "user"]
    assert rest[1].text == f"{SUMMARY_HEADING}\n\nS\n\nthree"
    asked = join_user_turn(messages, text_message("user", summary_request_text()))
    assert [m.role for m in asked] == [m.role for m in messages] and asked[-1].text.startswith("five\n\n")
    assert asked[-1].text.endswith(SUMMARY_REQUEST_END)
    after_tool = join_user_turn([Message("tool", (ToolResult("c1", "a b"),))], text_message("user", "x"))
    assert [m.role for m in after_tool] == ["tool", "user"]


def test_the_fewest_jobs_a_conversation_takes():
    """Each job reads what the context leaves; each after the first reads the summary before it too."""
    assert fewest_jobs(100, 100, 0) == 1
    assert fewest_jobs(101, 100, 0) == 2 and fewest_jobs(1000, 100, 0) == 10
    assert fewest_jobs(1000, 100, 50) == 1 + 18       # 100, then 50 more a job
    assert fewest_jobs(1000, 100, 100) == sys.maxsize  # a summary as long as a job's reading: no way on


class SliceEngine:
    """One token per character; remembers each text it was given."""

    def __init__(self):
        self.texts: list[str] = []

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True, limit=None):
        self.texts.append(text)
        return list(range(len(text)))


def test_a_prompt_is_counted_a_slice_at_a_time_and_no_further_than_needed():
    text = "<|im_start|>user\nmessage\n<|im_end|>\n" * 20_000
    engine = SliceEngine()
    assert count_tokens(engine, text, enough=10**9) == len(text)
    assert "".join(engine.texts) == text and len(engine.texts) > 1
    assert all(len(t) <= COUNT_SLICE_CHARS and t.endswith("\n") for t in engine.texts)
    engine = SliceEngine()
    assert count_tokens(engine, text, enough=1000) > 1000 and len(engine.texts) == 1     # enough known: stop
