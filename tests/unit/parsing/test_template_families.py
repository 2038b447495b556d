"""Every real chat template of the corpus: the family detected from it, and its own calls read
back, whole and streamed in small fragments, as the runtime reads a model's output (reasoning
split off first). The forced-call grammar for each family builds; the e2e conformance test
(tests/e2e/test_template_calls.py) runs it through the real sampler."""

from __future__ import annotations

import json

import pytest

from template_calls import (EXPECTED_FAMILIES, TAUGHT, TOOLS, generated_calls, generation_prompt, template,
                            written_calls)
from template_corpus import corpus_names, corpus_templates

from localserve.generation import Chunk, GenerationRequest, ToolCallDelta, ToolCallStart, ToolSpec
from localserve.grammar.grammar import tool_call_grammar
from localserve.models.loaded import detect_chat_family
from localserve.parsing.content_markup import detect_content_markup
from localserve.parsing.reasoning import detect_reasoning, prompt_opens_reasoning
from reasoning_split import split_reasoning      # tests/support/
from localserve.parsing.tools import ToolProjector, marker_prompt_opened
from localserve.runtime.textstream import OutputPipeline

PARAMETERS = {t["name"]: t["parameters"] for t in TOOLS}
NATIVE = corpus_names()       # every template: its own call format, or the one localserve's text teaches


def test_the_corpus_is_there_and_every_template_has_an_expected_family():
    names = set(corpus_templates())  # fails, with the reason, when the corpus is missing
    assert names == set(EXPECTED_FAMILIES)
    assert len(names) >= 70 and "json" not in EXPECTED_FAMILIES.values()


def test_the_taught_templates_show_no_tools_and_no_call_markup():
    """Their tools reach the model as localserve's text, which teaches Hermes markup: read back as
    Hermes. Others that show no tools name their model's markup (DeepSeek's) and keep it."""
    hidden = {name for name in corpus_names() if not template(name).caps.tools}
    assert TAUGHT <= hidden and {EXPECTED_FAMILIES[name] for name in TAUGHT} == {"hermes"}
    assert all("<tool_call>" not in corpus_templates()[name] for name in TAUGHT)
    assert all(EXPECTED_FAMILIES[name] != "hermes" for name in hidden - TAUGHT)


@pytest.mark.parametrize("name", corpus_names())
def test_family_detected_from_the_template(name):
    assert detect_chat_family(template(name)).name == EXPECTED_FAMILIES[name]


def _answer(name: str) -> tuple[str, list]:
    """The calls' text as the tool projector sees it: reasoning split off."""
    text, calls = written_calls(name)
    prompt = generation_prompt(name)
    fmt = detect_reasoning(corpus_templates()[name], prompt)
    # (a turn from history may leave out the reasoning the prompt opens: then it starts outside)
    inside = prompt_opens_reasoning(fmt, prompt) and fmt.end in text
    _, answer = split_reasoning(text, fmt, inside)
    return answer, calls


@pytest.mark.parametrize("name", NATIVE)
def test_the_templates_own_calls_parse_whole_and_streamed(name):
    family = detect_chat_family(template(name))
    answer, expected = _answer(name)
    whole = ToolProjector(family, PARAMETERS)
    whole.feed(answer)
    whole.finish()
    assert [(c.name, json.loads(c.arguments)) for c in whole.calls] == expected, answer

    streamed, events, size = ToolProjector(family, PARAMETERS), [], 1
    at = 0
    while at < len(answer):
        events += streamed.feed(answer[at:at + size])
        at, size = at + size, size % 5 + 1
    events += streamed.finish()
    assert [(c.name, c.arguments) for c in streamed.calls] == [(c.name, c.arguments) for c in whole.calls]
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [s.name for s in starts] == [n for n, _ in expected]
    fragments = [e.fragment for e in events if isinstance(e, ToolCallDelta) and e.index == starts[0].index]
    assert "".join(fragments) == whole.calls[0].arguments
    assert len(fragments) >= 2  # two arguments: they stream, not all at the end


@pytest.mark.parametrize("size", [1, 7, 100000])
@pytest.mark.parametrize("name", NATIVE)
def test_a_turn_of_calls_alone_comes_back_as_the_calls_and_nothing_else(name, size):
    """The text a model writes for a turn of calls as its template renders (or localserve's text
    teaches) one, through the runtime's own text stages after the real generation prompt
    (reasoning, the template's markup, the calls), in pieces of `size` bytes: the calls, and no
    marker left over as content or reasoning (GigaChat 3's <|message_sep|>, MiniMax-M3's bare
    </mm:think>, Apriel's calls in the reasoning its prompt opened)."""
    chat, (text, expected) = template(name), generated_calls(name)
    prompt = generation_prompt(name)
    family = detect_chat_family(chat)
    fmt = detect_reasoning(chat.text, prompt)
    request = GenerationRequest(
        prompt_tokens=[], reasoning=fmt, reasoning_starts_inside=prompt_opens_reasoning(fmt, prompt),
        content_markup=detect_content_markup(chat.text),
        tools=ToolSpec(family, PARAMETERS, starts_inside=bool(marker_prompt_opened(family, prompt))))
    pipeline, events, data = OutputPipeline(request), [], text.encode()
    for at in range(0, len(data), size):
        events += pipeline.feed(data[at:at + size])
    events += pipeline.finish()
    assert [(c.name, json.loads(c.arguments)) for c in pipeline.tool_calls] == expected, text
    assert not "".join(pipeline.content).strip() and not "".join(pipeline.reasoning).strip(), text


@pytest.mark.parametrize("name", NATIVE)
@pytest.mark.parametrize("parallel", [True, False])
def test_a_forced_call_grammar_builds_for_the_family(name, parallel):
    family = detect_chat_family(template(name))
    grammar = tool_call_grammar(family, TOOLS, parallel=parallel)
    assert grammar.startswith("root ::=")
    named = tool_call_grammar(family, TOOLS, parallel=parallel, forced_name="get_time")
    assert "get_weather" not in named


# Reasoning markers the corpus's templates show, beyond <think> (detected for the rest).
EXPECTED_REASONING = {
    "ByteDance-Seed-OSS": "seed", "Cohere2MoE": "command_r", "google-gemma-4-31B-it": "gemma4",
    "google-gemma-4-31B-it-interleaved": "gemma4", "MiniMax-M3": "minimax_m3", "Kimi-K3": "kimi_k3",
    "tencent-Hy3": "hunyuan", "Apriel-1.6-15b-Thinker-fixed": "apriel", "unsloth-Apriel-1.5": "apriel",
    "mistralai-Ministral-3-14B-Reasoning-2512": "magistral", "openai-gpt-oss-120b": "harmony",
    "GLM-4.7-Flash": "think", "MiniMax-M2": "think", "Qwen-Qwen3-0.6B": "think",
}


@pytest.mark.parametrize("name", sorted(EXPECTED_REASONING))
def test_reasoning_then_calls_split_and_parse(name):
    """The template's reasoning markers are found; a reasoning block before the calls is split
    off (whether the prompt opened it or the model does), and the calls still parse."""
    prompt = generation_prompt(name)
    fmt = detect_reasoning(corpus_templates()[name], prompt)
    assert fmt is not None and fmt.name == EXPECTED_REASONING[name]
    if fmt.name == "harmony":
        return  # harmony's channels: tests/unit/parsing/test_reasoning.py
    inside = prompt_opens_reasoning(fmt, prompt)
    text, expected = written_calls(name)
    reasoning, answer = split_reasoning(("" if inside else fmt.start) + "Let me look." + fmt.end + text,
                                        fmt, inside)
    assert reasoning == "Let me look."
    projector = ToolProjector(detect_chat_family(template(name)), PARAMETERS)
    projector.feed(answer)
    projector.finish()
    assert [(c.name, json.loads(c.arguments)) for c in projector.calls] == expected


@pytest.mark.parametrize("name", ["LFM2-8B-A1B", "LFM2.5-8B-A1B"])
def test_python_call_strings_are_read_as_python_reads_them(name):
    """LFM2 writes Python calls: a string value's escapes (a quote, a backslash, a newline, a
    unicode escape) are Python's, whole and streamed one character at a time."""
    text = ("<|tool_call_start|>[get_weather(city='O\\'Brien \\\\ x\\ny \\u00e9 \"q\" \\p', days=3)]"
            "<|tool_call_end|>")
    for size in (1, len(text)):
        projector = ToolProjector(detect_chat_family(template(name)), PARAMETERS)
        for at in range(0, len(text), size):
            projector.feed(text[at:at + size])
        projector.finish()
        [call] = projector.calls
        assert json.loads(call.arguments) == {"city": "O'Brien \\ x\ny é \"q\" \\p", "days": 3}


def test_gigachat3_prose_using_its_marker_word_flows_at_once():
    """GigaChat 3 opens its calls with `function call<|role_sep|>`: prose with the word
    "function" opens no call (a strict grammar would wake on it), holds back only what may still
    become the marker, and loses nothing at the message's end."""
    family = detect_chat_family(template("GigaChat3-10B-A1.8B"))
    text = "Call the function when the function call is due, or the functions of a misfunction call<|role_sep|>"
    projector, out = ToolProjector(family, PARAMETERS), ""
    for i in range(len(text)):
        out += "".join(e.text for e in projector.feed(text[i]) if isinstance(e, Chunk))
        assert projector.open_call is None, text[:i + 1]
        held = text[len(out):i + 1]
        # only what may still become the marker, where a word starts
        assert held == "" or (held[0] == "f" and text[i - len(held)] == " "
                              and "function call<|role_sep|>".startswith(held)), held
    out += "".join(e.text for e in projector.finish() if isinstance(e, Chunk))
    assert out == text
