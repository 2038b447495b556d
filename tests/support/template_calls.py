"""Tool calls as each real chat template of the corpus writes them (tests/support/template_corpus).

`EXPECTED_FAMILIES` is the family localserve must detect for each template; `NO_NATIVE_FORMAT` the
templates that show no call format of their own (or one localserve does not read yet: see README's
table). `written_calls(name)` is the text a model following its template generates for a turn of
calls: the template's own rendering of the assistant turn, after the generation prompt; for
templates that cannot render calls in history today, the family's format written by hand.
"""

from __future__ import annotations

import json

from template_corpus import corpus_templates

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
    "HuggingFaceTB-SmolLM3-3B": "json",
    "Kimi-K2-Instruct": "kimi_k2",
    "Kimi-K2-Thinking": "kimi_k2",
    "Kimi-K3": "kimi_k3",
    "LFM2-8B-A1B": "lfm2",
    "LFM2.5-8B-A1B": "lfm2",
    "LFM2.5-Instruct": "json",
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
    "google-gemma-2-2b-it": "json",
    "google-gemma-4-31B-it-interleaved": "gemma4",
    "google-gemma-4-31B-it": "gemma4",
    "ibm-granite-granite-3.3-2B-Instruct": "granite",
    "ibm-granite-granite-4.0": "hermes",
    "ibm-granite-granite-4.1": "hermes",
    "inclusionai-ling-3.0-flash": "glm",
    "llama-cpp-deepseek-r1": "deepseek",
    "llama-cpp-rwkv-world": "json",
    "meetkai-functionary-medium-v3.1": "functionary_v3_1",
    "meetkai-functionary-medium-v3.2": "functionary_v3_2",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3",
    "microsoft-Phi-3.5-mini-instruct": "json",
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

# No call format of their own in the template: tools shown as text, or not at all.
NO_NATIVE_FORMAT = {name for name, family in EXPECTED_FAMILIES.items() if family == "json"}

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


def template(name: str) -> ChatTemplate:
    return ChatTemplate(f"corpus:{name}", corpus_templates()[name], "<s>", "</s>")


def _turn(calls: list[tuple[str, dict]]) -> dict:
    return {"role": "assistant", "content": "Sure.", "tool_calls": [
        {"id": f"call{i}abcd", "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
        for i, (n, a) in enumerate(calls)]}


ASKED = [{"role": "user", "content": "What is the weather in Paris?"}]


def _render(chat: ChatTemplate, messages: list[dict], generation_prompt: bool) -> str | None:
    try:
        return chat.render_as_is(messages, tools=[{"type": "function", "function": t} for t in TOOLS],
                           add_generation_prompt=generation_prompt)
    except TemplateError:
        return None


def generation_prompt(name: str) -> str:
    """The template's prompt for the question, tools shown ("" where it cannot render it)."""
    return _render(template(name), ASKED, True) or ""


def rendered_calls(chat: ChatTemplate, calls: list[tuple[str, dict]]) -> str | None:
    """What the template writes after its generation prompt for an assistant turn of `calls`."""
    prompt, whole = _render(chat, ASKED, True), _render(chat, ASKED + [_turn(calls)], False)
    if prompt is None or whole is None:
        return None
    n = 0
    while n < min(len(prompt), len(whole)) and prompt[n] == whole[n]:
        n += 1
    while n and not (whole[n - 1].isspace() or whole[n - 1] in ">]"):  # not inside a marker
        n -= 1
    return whole[n:]


def written_calls(name: str) -> tuple[str, list[tuple[str, dict]]]:
    """(the text, the calls in it): both calls where the template writes parallel calls."""
    chat = template(name)
    for calls in (CALLS, CALLS[:1]):
        text = rendered_calls(chat, calls)
        if text is not None and all(n in text for n, _ in calls):
            return text, calls
    text = _BY_HAND[EXPECTED_FAMILIES[name]]
    return text, [c for c in CALLS if c[0] in text]
