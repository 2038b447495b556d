"""Splitting reasoning from the answer: tag pairs and harmony channels."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import family_templates      # tests/family_templates.py: always there, never skipped
from localserve.parsing.reasoning import (
    HARMONY, REASONING_FORMATS, ReasoningSplitter, detect_reasoning, prompt_opens_reasoning,
)
from reasoning_split import split_reasoning      # tests/support/
from localserve.parsing.tools import parse_generated_tools

THINK = REASONING_FORMATS["think"]


def stream(chunks, fmt, starts_inside=False):
    splitter = ReasoningSplitter(fmt, starts_inside=starts_inside)
    pieces = []
    for chunk in chunks:
        pieces += splitter.feed(chunk)
    pieces += splitter.finish()
    for a, b in zip(pieces, pieces[1:]):
        assert a[1] and b[1]
    reasoning = "".join(t for r, t in pieces if r)
    return reasoning, "".join(t for r, t in pieces if not r)


@pytest.mark.parametrize("text,starts_inside,expected", [
    ("<think>\nLet me see.\n</think>\n\nThe answer.", False, ("Let me see.", "The answer.")),
    ("  <think>a\n\nb  </think>Answer  ", False, ("a\n\nb", "Answer  ")),
    ("No reasoning here.", False, ("", "No reasoning here.")),
    ("Text first <think>not reasoning</think>", False, ("", "Text first <think>not reasoning</think>")),
    ("<thinking>is not the tag", False, ("", "<thinking>is not the tag")),
    ("<think>\n\n</think>\n\nAnswer", False, ("", "Answer")),
    ("<think>cut off mid-thought  ", False, ("cut off mid-thought", "")),
    ("Let me see.\n</think>\n\nThe answer.", True, ("Let me see.", "The answer.")),
    ("<think>\nrepeated tag\n</think>\nAnswer", True, ("repeated tag", "Answer")),
    ("all reasoning, never closed", True, ("all reasoning, never closed", "")),
    ("\n</think>\n\nAnswer", True, ("", "Answer")),
    ("", True, ("", "")),
    ("", False, ("", "")),
    ("   ", False, ("", "   ")),
    ("a < b </think> c", True, ("a < b", "c")),
])
def test_split_think(text, starts_inside, expected):
    assert split_reasoning(text, THINK, starts_inside) == expected
    for i in range(len(text) + 1):
        assert stream([text[:i], text[i:]], THINK, starts_inside) == expected, i
    assert stream(list(text), THINK, starts_inside) == expected


def test_no_format_is_all_content():
    assert split_reasoning("<think>x</think>y", None) == ("", "<think>x</think>y")


def test_partial_markers_are_held_then_released():
    splitter = ReasoningSplitter(THINK)
    assert splitter.feed("<th") == []
    assert splitter.feed("ink>") == []
    assert splitter.in_reasoning
    assert splitter.feed("step one") == [(True, "step one")]
    assert splitter.feed("\n</thi") == []            # whitespace and a partial end held
    assert splitter.feed("s is not the end") == [(True, "\n</this is not the end")]
    assert splitter.feed("</think>") == []
    assert not splitter.in_reasoning
    assert splitter.feed("\n\n") == []                # trimmed
    assert splitter.feed("Answer") == [(False, "Answer")]
    assert splitter.finish() == []


def test_content_lead_is_released_once_it_cannot_be_a_tag():
    splitter = ReasoningSplitter(THINK)
    assert splitter.feed("\n<t") == []
    assert splitter.feed("able>") == [(False, "\n<table>")]


def test_other_tag_formats():
    for name, text in [("seed", "<seed:think>r</seed:think>c"), ("magistral", "[THINK]r[/THINK]c"),
                       ("command_r", "<|START_THINKING|>r<|END_THINKING|>c")]:
        assert split_reasoning(text, REASONING_FORMATS[name]) == ("r", "c")


@pytest.mark.parametrize("name,text,expected", [
    ("minimax_m3", "</mm:think>The answer.", ("", "The answer.")),
    ("minimax_m3", "\n</mm:think>\n\nThe answer.", ("", "The answer.")),
    ("think", "</think>The answer.", ("", "The answer.")),
    ("minimax_m3", "The answer. </mm:think>", ("", "The answer. </mm:think>")),   # later on: just text
])
def test_an_end_tag_alone_at_the_start_is_an_empty_block(name, text, expected):
    """MiniMax-M3 opens every turn without reasoning with a bare </mm:think>: nobody's text."""
    fmt = REASONING_FORMATS[name]
    assert split_reasoning(text, fmt) == expected
    for i in range(len(text) + 1):
        assert stream([text[:i], text[i:]], fmt) == expected, i
    assert stream(list(text), fmt) == expected


@pytest.mark.parametrize("text,expected", [
    ('Checking.\n<tool_calls>[{"name": "f"}]</tool_calls>', ("Checking.", '<tool_calls>[{"name": "f"}]</tool_calls>')),
    ('\n<tool_calls>[{"name": "f"}]</tool_calls>', ("", '<tool_calls>[{"name": "f"}]</tool_calls>')),
    ("Checking.\n[BEGIN FINAL RESPONSE]\n<tool_calls>[]</tool_calls>", ("Checking.", "<tool_calls>[]</tool_calls>")),
    ("Is <tool_call> the tag?", ("Is <tool_call> the tag?", "")),
])
def test_apriels_calls_end_the_reasoning_its_prompt_opened(text, expected):
    """Apriel's prompt opens the reasoning; its template writes a turn of calls with no
    final-response marker: the calls' own opening ends the reasoning, and stays theirs."""
    fmt = REASONING_FORMATS["apriel"]
    assert split_reasoning(text, fmt, True) == expected
    assert stream(list(text), fmt, True) == expected


def test_reasoning_budget_close_ends_the_block():
    splitter = ReasoningSplitter(THINK, starts_inside=True)
    for token in ["I", " wonder", " about", " this"]:
        splitter.feed(token)
    assert splitter.in_reasoning and splitter.reasoning_chunks == 4
    splitter.feed(THINK.close)  # what the runtime injects after N reasoning tokens
    assert not splitter.in_reasoning
    assert splitter.feed("Done.") == [(False, "Done.")]
    assert splitter.reasoning_chunks == 5

    splitter = ReasoningSplitter(HARMONY)
    splitter.feed("<|channel|>analysis<|message|>thinking")
    assert splitter.in_reasoning
    assert splitter.feed(HARMONY.close) == []
    assert not splitter.in_reasoning
    assert splitter.feed("Answer") == [(False, "Answer")]


HARMONY_EXAMPLES = [
    ("<|channel|>analysis<|message|>User asks sum. 5050.<|end|><|start|>assistant<|channel|>final"
     "<|message|>The sum is 5050.<|return|>", ("User asks sum. 5050.", "The sum is 5050.")),
    ("<|channel|>final<|message|>Just the answer.", ("", "Just the answer.")),
    ("<|channel|>commentary<|message|>Checking now.<|end|><|start|>assistant<|channel|>final"
     "<|message|>Done.", ("", "Checking now.Done.")),
    ("plain text, not harmony at all", ("", "plain text, not harmony at all")),
    ("<|channel|>analysis<|message|>cut off", ("cut off", "")),
    ("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|chan", ("x", "")),
]


@pytest.mark.parametrize("text,expected", HARMONY_EXAMPLES)
def test_harmony_channels(text, expected):
    assert split_reasoning(text, HARMONY) == expected
    for i in range(len(text) + 1):
        assert stream([text[:i], text[i:]], HARMONY) == expected, i


def test_harmony_tool_call_passes_through_for_the_tool_parser():
    call = ('<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json'
            '<|message|>{"city": "Paris"}<|call|>')
    text = "<|channel|>analysis<|message|>Need the weather.<|end|>" + call
    reasoning, content = split_reasoning(text, HARMONY)
    assert (reasoning, content) == ("Need the weather.", call)
    assert [stream(list(text), HARMONY)] == [(reasoning, content)]
    _, calls = parse_generated_tools(content, "harmony", {"get_weather"})
    assert [(c.name, c.arguments) for c in calls] == [("get_weather", '{"city":"Paris"}')]
    # The recipient in the role header, right after the prompt's "<|start|>assistant".
    text = ' to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>'
    reasoning, content = split_reasoning(text, HARMONY)
    assert reasoning == "" and content == text
    _, calls = parse_generated_tools(content, "harmony", {"get_weather"})
    assert [c.name for c in calls] == ["get_weather"]


def test_harmony_starting_inside_analysis():
    assert split_reasoning("deep thought<|end|><|start|>assistant<|channel|>final<|message|>42",
                           HARMONY, starts_inside=True) == ("deep thought", "42")


def test_detect_reasoning():
    assert detect_reasoning("{{ '<|im_start|>assistant\\n<think>\\n' }}", "") is THINK
    assert detect_reasoning("{% set c = c.split('</think>')[-1] %}", "") is THINK
    assert detect_reasoning(None, "<｜Assistant｜><think>\n") is THINK
    assert detect_reasoning("{{ '<|channel|>analysis<|message|>' }}", "<|start|>assistant") is HARMONY
    assert detect_reasoning("{{ '[THINK]' }}", "").name == "magistral"
    assert detect_reasoning("{{ '<start_of_turn>model\\n' }}", "<start_of_turn>model\n") is None
    assert detect_reasoning(None, "") is None


def test_prompt_opens_reasoning():
    assert prompt_opens_reasoning(THINK, "<|im_start|>assistant\n<think>\n")
    assert prompt_opens_reasoning(THINK, "<｜Assistant｜><think>")
    assert not prompt_opens_reasoning(THINK, "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert not prompt_opens_reasoning(THINK, "<|im_start|>assistant\n")
    assert not prompt_opens_reasoning(None, "<think>\n")
    assert prompt_opens_reasoning(HARMONY, "<|start|>assistant<|channel|>analysis<|message|>")
    assert not prompt_opens_reasoning(HARMONY, "<|start|>assistant")


def test_detect_reasoning_on_the_family_test_templates():
    templates = family_templates.FAMILY_TEMPLATES
    assert detect_reasoning(templates["qwen3"], "") is THINK
    assert detect_reasoning(templates["deepseek_r1"], "") is THINK
    assert detect_reasoning(templates["gpt_oss"], "") is HARMONY
    assert detect_reasoning(templates["hermes"], "") is None


# --- properties -------------------------------------------------------------------------

def _pieces(fmt):
    markers = ([fmt.start, fmt.end, fmt.close, *fmt.ended_by] if fmt is not HARMONY else
               ["<|channel|>analysis<|message|>", "<|channel|>final<|message|>", "<|end|>",
                "<|start|>assistant", "<|return|>", "<|call|>", "<|channel|>commentary",
                " to=functions.f", "<|message|>", "<|constrain|>json"])
    cut = st.builds(lambda m, k: m[:k], st.sampled_from(markers), st.integers(1, 20))
    return st.one_of(st.sampled_from(markers), cut, st.text("ab \n\t<>/|", max_size=6))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), fmt=st.sampled_from(list(REASONING_FORMATS.values())),
       starts_inside=st.booleans())
def test_any_chunking_matches_whole_split(data, fmt, starts_inside):
    text = "".join(data.draw(st.lists(_pieces(fmt), max_size=12)))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=10)))
    chunks = [text[i:j] for i, j in zip([0] + cuts, cuts + [len(text)])]
    expected = split_reasoning(text, fmt, starts_inside)
    assert stream(chunks, fmt, starts_inside) == expected
    assert stream(list(text), fmt, starts_inside) == expected
    if fmt is not HARMONY:  # framing never leaks: no start tag opens the reasoning
        assert not expected[0].startswith(fmt.start)
