"""Tool calls as each real chat template of the corpus writes them (tests/support/template_corpus).

`EXPECTED_FAMILIES` is the family localserve must detect for each template; `TAUGHT` the templates
that show no tools, whose model learns them from localserve's own text (prompt/polyfill), which
teaches Hermes' `<tool_call>` markup. `written_calls(name)` is the text a model following its
template generates for a turn of calls: the template's own rendering of the assistant turn, after
the generation prompt; for templates that cannot render calls in history today, the family's
format written by hand; for the taught ones, the turn as localserve renders it (calls as text).
"""

from __future__ import annotations

import json
from dataclasses import replace

from template_corpus import corpus_templates

from localserve.models.loaded import detect_chat_family
from localserve.parsing.reasoning import detect_reasoning, prompt_opens_reasoning
from localserve.prompt.jinja_env import at_moment
from localserve.prompt.templates import ChatTemplate, TemplateError

EXPECTED_FAMILIES = {
    "Apertus-8B-Instruct": "apertus",
    "Apriel-1.6-15b-Thinker-fixed": "apriel",
    "Bielik-11B-v3.0-Instruct": "hermes",
    "ByteDance-Seed-OSS": "seed_oss",
    "Cohere2MoE": "command_r",
    "CohereForAI-c4ai-command-r-plus-tool_use": "command_r_plus",
    "CohereForAI-c4ai-command-r7b-12-2024-tool_use": "command_r",
    "GLM-4.6": "glm",
    "GLM-4.7-Flash": "glm",
    "GigaChat3-10B-A1.8B": "gigachat",
    "GigaChat3.1-10B-A1.8B": "gigachat",
    "HuggingFaceTB-SmolLM3-3B": "hermes",
    "Kimi-K2-Instruct": "kimi_k2",
    "Kimi-K2-Thinking": "kimi_k2",
    "Kimi-K3": "kimi_k3",
    "LFM2-8B-A1B": "lfm2",
    "LFM2.5-8B-A1B": "lfm2",
    "LFM2.5-Instruct": "lfm2",
    "MiMo-VL": "hermes",
    "MiniMax-M1": "minimax_m1",
    "MiniMax-M2": "minimax_m2",
    "MiniMax-M3": "minimax_m3",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral",
    "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16": "qwen3_coder",
    "NVIDIA-Nemotron-Nano-v2": "nemotron",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes",
    "Qwen-QwQ-32B": "hermes",
    "Qwen-Qwen2.5-7B-Instruct": "hermes",
    "Qwen-Qwen3-0.6B": "hermes",
    "Qwen3-Coder": "qwen3_coder",
    "Qwen3.5-4B": "qwen3_coder",
    "Reka-Edge": "hermes",
    "Spark2.5": "glm",
    "StepFun3.5-Flash": "qwen3_coder",
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": "deepseek",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek",
    "deepseek-ai-DeepSeek-V3.1": "deepseek",
    "deepseek-ai-DeepSeek-V3.2": "deepseek_dsml",
    "deepseek-ai-DeepSeek-V4-Flash-0731": "deepseek_dsml",
    "deepseek-ai-DeepSeek-V4": "deepseek_dsml",
    "fireworks-ai-llama-3-firefunction-v2": "derived",
    "google-gemma-2-2b-it": "hermes",
    "google-gemma-4-31B-it-interleaved": "gemma4",
    "google-gemma-4-31B-it": "gemma4",
    "ibm-granite-granite-3.3-2B-Instruct": "granite",
    "ibm-granite-granite-4.0": "hermes",
    "ibm-granite-granite-4.1": "hermes",
    "inclusionai-ling-3.0-flash": "glm",
    "llama-cpp-deepseek-r1": "deepseek",
    "llama-cpp-rwkv-world": "hermes",
    "meetkai-functionary-medium-v3.1": "functionary_v3_1",
    "meetkai-functionary-medium-v3.2": "functionary_v3_2",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3",
    "microsoft-Phi-3.5-mini-instruct": "hermes",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
    "moonshotai-Kimi-K2": "kimi_k2",
    "muse-glimmer": "muse",
    "openai-gpt-oss-120b": "harmony",
    "openbmb-MiniCPM5-1B": "minicpm",
    "poolside-Laguna-S-2.1": "glm",
    "poolside-Laguna-XS-2.1": "glm",
    "poolside-Laguna-XS.2": "glm",
    "tencent-Hy3": "hunyuan",
    "unsloth-Apriel-1.5": "apriel",
    "unsloth-mistral-Devstral-Small-2507": "mistral",
    "upstage-Solar-Open-100B": "solar",
}

# No tools shown by the template: localserve's text shows them, and teaches the calls' markup.
TAUGHT = {"HuggingFaceTB-SmolLM3-3B", "google-gemma-2-2b-it", "llama-cpp-rwkv-world",
          "microsoft-Phi-3.5-mini-instruct"}

WEATHER = {"name": "get_weather", "description": "Weather for a city", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                     "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["city", "days"]}}
TIME = {"name": "get_time", "description": "The time in a zone", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"]}}
TOOLS = [WEATHER, TIME]
CALLS = [("get_weather", {"city": "Paris", "days": 3}), ("get_time", {"zone": "UTC"})]

# The formats of templates that do not render calls in history today, as their models write them.
_BY_HAND = {
    "kimi_k2": ('<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>'
                '{"city": "Paris", "days": 3}<|tool_call_end|><|tool_call_begin|>functions.get_time:1'
                '<|tool_call_argument_begin|>{"zone": "UTC"}<|tool_call_end|><|tool_calls_section_end|>'),
    "lfm2": "<|tool_call_start|>[get_weather(city='Paris', days=3), get_time(zone='UTC')]<|tool_call_end|>",
    "granite": ('<|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
                '{"name": "get_time", "arguments": {"zone": "UTC"}}]'),
    "deepseek": ("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n"
                 '```json\n{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜>\n'
                 "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                 'get_time\n```json\n{"zone": "UTC"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'),
    "command_r_plus": ('Action:\n```json\n[\n{\n    "tool_name": "get_weather",\n    "parameters": '
                       '{"city": "Paris", "days": 3}\n},\n{\n    "tool_name": "get_time",\n    "parameters": '
                       '{"zone": "UTC"}\n}\n]\n```'),
    "firefunction": (' functools[{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}, '
                     '{"name": "get_time", "arguments": {"zone": "UTC"}}]'),
    "harmony": ('<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
                '{"city": "Paris", "days": 3}<|call|>'),
}


# Templates whose generation prompt opens the reasoning and whose turn of calls has no reasoning
# and no end marker (Apriel 1.6): the model writes its calls right there, and they end the reasoning.
CALLS_END_REASONING = {"Apriel-1.6-15b-Thinker-fixed"}

# What a template writes after a turn of calls where the model stops: an end-of-generation token,
# beside the end of a turn (Phi 3.5's </s> after <|end|>, Gemma 4's <|tool_response>).
_GENERATION_ENDS = ("</s>", "<|tool_response>")


def template(name: str) -> ChatTemplate:
    return ChatTemplate(f"corpus:{name}", corpus_templates()[name], "<s>", "</s>")


def served_template(name: str) -> ChatTemplate:
    """The template as the server holds it: calls and tools it cannot show written in its family's words."""
    chat = template(name)
    return replace(chat, calls_family=detect_chat_family(chat))


def _turn(calls: list[tuple[str, dict]], content: str | None) -> dict:
    return {"role": "assistant", "content": content, "tool_calls": [
        {"id": f"call{i}abcd", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(calls)]}


ASKED = [{"role": "user", "content": "What is the weather in Paris?"}]


def _render(chat: ChatTemplate, messages: list[dict], generation_prompt: bool, as_served: bool = False) -> str | None:
    tools = [{"type": "function", "function": t} for t in TOOLS]
    try:
        if as_served:
            return chat.render(messages, tools=tools, add_generation_prompt=generation_prompt)
        return chat.render_as_is(messages, tools=tools, add_generation_prompt=generation_prompt)
    except TemplateError:
        return None


def generation_prompt(name: str) -> str:
    """The template's prompt for the question, tools shown ("" where it cannot render it)."""
    return _render(template(name), ASKED, True) or ""


def rendered_calls(chat: ChatTemplate, calls: list[tuple[str, dict]], as_served: bool = False,
                   content: str | None = "Sure.") -> str | None:
    """What the template writes after its generation prompt for an assistant turn of `calls`."""
    # A template that shows the time (firefunction's `datetime`, to the second; Llama 3's date)
    # would render the two differently across a clock tick: both show one moment.
    with at_moment():
        prompt = _render(chat, ASKED, True, as_served)
        whole = _render(chat, ASKED + [_turn(calls, content)], False, as_served)
    if prompt is None or whole is None:
        return None
    n = 0
    while n < min(len(prompt), len(whole)) and prompt[n] == whole[n]:
        n += 1
    while n < len(prompt) and n and not (whole[n - 1].isspace() or whole[n - 1] in ">]"):  # not inside a marker
        n -= 1
    return whole[n:]


def written_calls(name: str, content: str | None = "Sure.") -> tuple[str, list[tuple[str, dict]]]:
    """(the text, the calls in it): both calls where the template writes parallel calls; the
    turn's own text is `content` ("" or None: whichever the template takes)."""
    chat, taught = (served_template(name), True) if name in TAUGHT else (template(name), False)
    for calls in (CALLS, CALLS[:1]):
        for text in (rendered_calls(chat, calls, taught, c) for c in ((content,) if content else ("", None))):
            if text is not None and all(n in text for n, _ in calls):
                return text, calls
    text = _BY_HAND[EXPECTED_FAMILIES[name]]
    return text, [c for c in CALLS if c[0] in text]


def generated_calls(name: str) -> tuple[str, list[tuple[str, dict]]]:
    """What a model following its template generates for a turn of calls alone: the calls as the
    template writes them, without the turn's end (an end-of-generation token, never text); where
    the prompt opens a reasoning block the calls do not end, the block closed first."""
    text, calls = written_calls(name, "")
    ends = tuple(e for e in (template(name).caps.end_of_turn, *_GENERATION_ENDS) if e)
    while (text := text.rstrip()).endswith(ends):
        text = text[:-len(next(e for e in ends if text.endswith(e)))]
    prompt = generation_prompt(name)
    fmt = detect_reasoning(corpus_templates()[name], prompt)
    if prompt_opens_reasoning(fmt, prompt) and fmt.end not in text and name not in CALLS_END_REASONING:
        text = fmt.close + text
    return text, calls
