"""Every real chat template (llama.cpp's corpus) renders every agent conversation, through the code
the server renders with (render_chat), showing the tools, every call and result, and no None; the
same conversations also as Anthropic Messages and Responses input, read by those dialects' readers."""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from agent_conversations import CHECKS, CONVERSATIONS, TOOLS, as_anthropic, as_responses, problems  # noqa: E402
from template_corpus import corpus_names, corpus_templates  # noqa: E402

from localserve.dialects.anthropic.input import read_input as read_anthropic_input  # noqa: E402
from localserve.dialects.responses.items import read_input as read_responses_input  # noqa: E402
from localserve.dialects.responses.items import to_messages  # noqa: E402
from localserve.dialects.function_tools import function_definitions  # noqa: E402
from localserve.dialects.openai.chat_input import read_messages  # noqa: E402
from localserve.models.loaded import detect_chat_family  # noqa: E402
from localserve.prompt.build import ChatInput, render_chat  # noqa: E402
from localserve.prompt.templates import ChatTemplate  # noqa: E402


def corpus_template(name: str) -> ChatTemplate:
    """The template as a model is served with it: calls it cannot show written in its family's words."""
    template = ChatTemplate(f"corpus:{name}", corpus_templates()[name], "<s>", "</s>")
    return dataclasses.replace(template, calls_family=detect_chat_family(template))


def rendered(name: str, messages: list[dict]) -> str:
    chat = ChatInput(messages=read_messages({"messages": messages}), tools=function_definitions(TOOLS))
    return render_chat(corpus_template(name), chat)


def test_the_corpus_is_there():
    # the parametrised tests below would pass by running nothing without it
    assert len(corpus_templates()) >= 60


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("name", corpus_names())
def test_template_renders_the_agent_conversation(name, check):
    messages = CONVERSATIONS[check]
    assert problems(rendered(name, messages), messages) == []


@pytest.mark.parametrize("name", corpus_names())
def test_reasoning_of_the_tool_loop_under_way_is_shown_where_the_template_shows_any(name):
    messages = CONVERSATIONS["reasoning_in_history"]
    if corpus_template(name).caps.reasoning_in_tool_loop:
        assert "need the weather" in rendered(name, messages)


def test_gpt_oss_reads_reasoning_as_thinking():
    prompt = rendered("openai-gpt-oss-120b", CONVERSATIONS["reasoning_in_history"])
    assert "<|channel|>analysis<|message|>need the weather<|end|>" in prompt


def test_probe_findings_on_known_templates():
    caps = {name: corpus_template(name).caps for name in (
        "mistralai-Mistral-Nemo-Instruct-2407", "meta-llama-Llama-3.1-8B-Instruct", "google-gemma-2-2b-it",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", "Qwen-Qwen3-0.6B", "Qwen-Qwen2.5-7B-Instruct",
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "openai-gpt-oss-120b",
        "CohereForAI-c4ai-command-r-plus-tool_use")}
    assert caps["mistralai-Mistral-Nemo-Instruct-2407"].call_ids == "alnum9"
    assert not caps["mistralai-Mistral-Nemo-Instruct-2407"].system_after_calls
    assert not caps["meta-llama-Llama-3.1-8B-Instruct"].parallel_tool_calls
    assert not caps["google-gemma-2-2b-it"].system_role
    assert not caps["deepseek-ai-DeepSeek-R1-Distill-Qwen-32B"].tools
    assert not caps["Qwen-Qwen3-0.6B"].null_content and caps["Qwen-Qwen3-0.6B"].empty_content
    assert caps["deepseek-ai-DeepSeek-R1-Distill-Llama-8B"].arguments == "string"
    assert caps["meta-llama-Llama-3.1-8B-Instruct"].end_of_turn == "<|eot_id|>"
    gpt_oss = caps["openai-gpt-oss-120b"]
    assert (gpt_oss.end_of_turn, gpt_oss.reasoning_field, gpt_oss.null_content) == ("<|return|>", "thinking", False)
    assert caps["CohereForAI-c4ai-command-r-plus-tool_use"].needs_tools_list
    qwen = caps["Qwen-Qwen2.5-7B-Instruct"]
    assert (qwen.system_role, qwen.tools, qwen.tool_calls, qwen.parallel_tool_calls, qwen.call_ids,
            qwen.end_of_turn) == (True, True, True, True, "any", "<|im_end|>")


def test_mistral_sees_nine_character_ids_the_same_every_turn():
    messages = CONVERSATIONS["parallel_calls"]
    prompt = rendered("mistralai-Mistral-Nemo-Instruct-2407", messages)
    ids = re.findall(r'"id": "([^"]*)"', prompt) + re.findall(r'"call_id": "([^"]*)"', prompt)
    assert ids and all(re.fullmatch(r"[A-Za-z0-9]{9}", i) for i in ids)
    # call_W1x2y3z4a and toolu_… keep their random part when it is nine characters
    assert "W1x2y3z4a" in prompt
    assert prompt == rendered("mistralai-Mistral-Nemo-Instruct-2407", messages)


def test_anthropic_ids_of_the_models_own_calls_map_back_to_them():
    # the model wrote aB3dE5gH7; Anthropic clients saw toolu_aB3dE5gH7 and send that back
    call = {"id": "toolu_aB3dE5gH7", "type": "function", "function": {"name": "get_weather",
                                                                      "arguments": '{"city": "Paris-v1"}'}}
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "toolu_aB3dE5gH7", "content": "sunny"}]
    prompt = rendered("Mistral-Small-3.2-24B-Instruct-2506", messages)
    assert "aB3dE5gH7" in prompt and "toolu_" not in prompt


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("name", corpus_names())
def test_template_renders_the_conversation_sent_as_anthropic_messages(name, check):
    messages = CONVERSATIONS[check]
    chat = read_anthropic_input(as_anthropic(messages), b"k" * 32).chat
    assert problems(render_chat(corpus_template(name), chat), messages) == []


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.parametrize("name", corpus_names())
def test_template_renders_the_conversation_sent_as_responses_items(name, check):
    messages = CONVERSATIONS[check]
    items, instructions = as_responses(messages)
    chat = ChatInput(messages=to_messages(read_responses_input(items), instructions),
                     tools=function_definitions(TOOLS))
    assert problems(render_chat(corpus_template(name), chat), messages) == []


def test_every_corpus_template_is_probed_and_compiled_once():
    """The caches hold the whole corpus: probing every template twice probes (and compiles) each once."""
    from localserve.prompt.jinja_env import compile_template
    from localserve.prompt.templates import _probed
    texts = sorted(set(corpus_templates().values()))   # (a few corpus files are the same template)
    for text in texts * 2:
        _probed(text, "<s>", "</s>")
        compile_template(text)
    for cache in (_probed, compile_template):
        assert cache.cache_info().currsize >= len(texts)
    _probed.cache_clear()
    misses = _probed.cache_info().misses
    for text in texts * 2:
        _probed(text, "<s>", "</s>")
    assert _probed.cache_info().misses - misses == len(texts)


def test_command_r_plus_renders_parameters_without_a_description():
    """Command R+ adds each parameter's description to a string; clients often send none."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    chat = corpus_template("CohereForAI-c4ai-command-r-plus-tool_use")
    assert chat.caps.needs_descriptions
    prompt = render_chat(chat, ChatInput(messages=read_messages({"messages": [{"role": "user", "content": "Weather?"}]}),
                                         tools=function_definitions(tools)))
    assert "def get_weather(city: str)" in prompt and "city (str): \n" in prompt
    assert not corpus_template("Qwen-Qwen3-0.6B").caps.needs_descriptions   # the others see the tools as sent


CALL_TURNS = [{"role": "user", "content": "Weather in Paris?"},
              {"role": "assistant", "content": "", "tool_calls": [{"id": "call0abcd", "type": "function", "function": {
                  "name": "get_weather", "arguments": '{"city": "O\'Brien", "unit": "c"}'}}]},
              {"role": "tool", "tool_call_id": "call0abcd", "content": "sunny"}]


@pytest.mark.parametrize(("name", "written"), [
    ("LFM2-8B-A1B", "<|tool_call_start|>[get_weather(city='O\\'Brien', unit='c')]<|tool_call_end|>"),
    ("ibm-granite-granite-3.3-2B-Instruct",
     '<|tool_call|>[{"name": "get_weather", "arguments": {"city": "O\'Brien", "unit": "c"}}]'),
    ("deepseek-ai-DeepSeek-R1-Distill-Llama-8B", "<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"),
])
def test_calls_a_template_cannot_show_are_written_in_the_familys_own_words(name, written):
    """The model sees in history the format it writes itself; Hermes markup only for a family
    with no words of its own."""
    prompt = rendered(name, CALL_TURNS)
    assert written in prompt and "<tool_call>" not in prompt, prompt[-600:]


def test_tools_a_template_cannot_show_say_how_to_call_in_the_familys_words():
    prompt = rendered("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", [{"role": "user", "content": "Hi"}])
    assert "<｜tool▁call▁begin｜>function<｜tool▁sep｜>function_name" in prompt and "<tool_call>" not in prompt
    generic = rendered("HuggingFaceTB-SmolLM3-3B", CALL_TURNS)   # no format of its own: Hermes markup
    assert '<tool_call>\n{"name": "get_weather"' in generic
