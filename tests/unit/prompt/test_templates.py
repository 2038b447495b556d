"""Chat-template rendering: the family templates, the builtins, normalization, the sandbox."""

from __future__ import annotations

import datetime
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from family_templates import (  # noqa: E402
    FAMILY_BOS_TOKEN,
    FAMILY_EOS_TOKEN,
    FAMILY_SPECIAL_TOKENS,
    FAMILY_TEMPLATES,
)

from localserve.prompt import jinja_env  # noqa: E402
from localserve.prompt.templates import (  # noqa: E402
    BUILTIN_TEMPLATES,
    ChatTemplate,
    TemplateError,
    ToolArguments,
    choose_template,
    normalize_messages,
)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}

PLAIN = [
    {"role": "user", "content": "Hi there"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "How are you?"},
]
SYSTEM = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
}
TOOL_ROUND = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
]

HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
HERMES_RESULT = "<tool_response>\nsunny\n</tool_response>"

# Per family: the generation prompt's tail, markers (in order) with tools, and
# markers (in order) for an assistant tool call followed by its result.
EXPECT = {
    "hermes": (
        "<|im_start|>assistant\n",
        ["<|im_start|>system\nBe brief.", "<tools>", '"name": "get_weather"', "</tools>", "<tool_call>", "<|im_end|>", "Weather in Paris?"],
        [HERMES_CALL + "<|im_end|>", "<|im_start|>user\n" + HERMES_RESULT + "<|im_end|>"],
    ),
    "qwen3": (
        "<|im_start|>assistant\n<think>\n",
        ["<|im_start|>system\nBe brief.", "<tools>", '"name": "get_weather"', "</tools>", "Weather in Paris?"],
        [HERMES_CALL + "<|im_end|>", "<|im_start|>user\n" + HERMES_RESULT + "<|im_end|>"],
    ),
    "qwen3_coder": (
        "<|im_start|>assistant\n",
        ["Be brief.", "<tools>", "<name>get_weather</name>", "<name>city</name>", "</tools>", "<function=example_function_name>", "Weather in Paris?"],
        ["<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call><|im_end|>",
         "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<|im_end|>"],
    ),
    "llama3": (
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
        ["<|begin_of_text|>", "Environment: ipython", "Be brief.<|eot_id|>", "<|start_header_id|>user<|end_header_id|>",
         '"name": "get_weather"', "Weather in Paris?<|eot_id|>"],
        ['<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|>',
         '<|start_header_id|>ipython<|end_header_id|>\n\n"sunny"<|eot_id|>'],
    ),
    "mistral": (
        "[/INST]",
        ["<s>", "[AVAILABLE_TOOLS]", '"name": "get_weather"', "[/AVAILABLE_TOOLS]", "[INST]", "Weather in Paris?[/INST]"],
        ['[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "call_1"}]</s>',
         '[TOOL_RESULTS]{"content": "sunny", "call_id": "call_1"}[/TOOL_RESULTS]'],
    ),
    "deepseek_r1": (
        "<｜Assistant｜><think>\n",
        ["<｜begin▁of▁sentence｜>Be brief.", "## Tools", "### get_weather", '"city"', "<｜User｜>Weather in Paris?"],
        ['<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{"city": "Paris"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜><｜end▁of▁sentence｜>',
         "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>sunny<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"],
    ),
    "gpt_oss": (
        "<|start|>assistant",
        ["<|start|>system<|message|>", "Reasoning: medium", "commentary channel: 'functions'", "<|end|>",
         "<|start|>developer<|message|># Instructions\n\nBe brief.", "namespace functions {", "// Current weather for a city\ntype get_weather = (_: {",
         "} // namespace functions<|end|>", "<|start|>user<|message|>Weather in Paris?<|end|>"],
        ['<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>',
         '<|start|>functions.get_weather to=assistant<|channel|>commentary<|message|>"sunny"<|end|>'],
    ),
    "gemma": (
        "<start_of_turn>model\n",
        ["<bos><start_of_turn>user\nBe brief.\n\n", "<tools>", '"name": "get_weather"', "</tools>", "Weather in Paris?<end_of_turn>"],
        ["<start_of_turn>model\n" + HERMES_CALL + "<end_of_turn>\n", "<start_of_turn>user\n" + HERMES_RESULT + "<end_of_turn>\n"],
    ),
    "chatml": (
        "<|im_start|>assistant\n",
        ["<|im_start|>system\nBe brief.\n\n", "<tools>", '"name": "get_weather"', "</tools>", "<|im_end|>", "Weather in Paris?"],
        ["<|im_start|>assistant\n" + HERMES_CALL + "<|im_end|>\n", "<|im_start|>user\n" + HERMES_RESULT + "<|im_end|>\n"],
    ),
}


def family(name: str) -> ChatTemplate:
    return ChatTemplate(f"test:{name}", FAMILY_TEMPLATES[name], FAMILY_BOS_TOKEN[name], FAMILY_EOS_TOKEN[name])


def assert_in_order(text: str, *markers: str) -> None:
    pos = 0
    for marker in markers:
        found = text.find(marker, pos)
        assert found >= 0, f"{marker!r} not found after position {pos} in:\n{text}"
        pos = found + len(marker)


def test_every_family_has_expectations_and_tokens():
    assert set(FAMILY_TEMPLATES) == set(EXPECT) == set(FAMILY_SPECIAL_TOKENS)
    assert set(FAMILY_TEMPLATES) == set(FAMILY_BOS_TOKEN) == set(FAMILY_EOS_TOKEN)
    for name, tokens in FAMILY_SPECIAL_TOKENS.items():
        texts = [t if isinstance(t, str) else t[0] for t in tokens]
        for special in (FAMILY_BOS_TOKEN[name], FAMILY_EOS_TOKEN[name]):
            assert not special or special in texts, (name, special)
        for t in tokens:
            assert isinstance(t, str) or t[1] in ("control", "user_defined")


@pytest.mark.parametrize("name", sorted(FAMILY_TEMPLATES))
def test_family_plain_conversation(name):
    prompt = family(name).render(PLAIN)
    assert_in_order(prompt, "Hi there", "Hello!", "How are you?")
    assert prompt.endswith(EXPECT[name][0])
    if name != "mistral":  # Mistral has no generation prompt: [/INST] is it
        assert not family(name).render(PLAIN, add_generation_prompt=False).endswith(EXPECT[name][0])


@pytest.mark.parametrize("name", sorted(FAMILY_TEMPLATES))
def test_family_system_message(name):
    prompt = family(name).render(SYSTEM)
    assert_in_order(prompt, "Be brief.", "Hi there")
    assert prompt.count("Be brief.") == 1


@pytest.mark.parametrize("name", sorted(FAMILY_TEMPLATES))
def test_family_tools(name):
    messages = TOOL_ROUND[:2]
    prompt = family(name).render(messages, tools=[WEATHER_TOOL])
    assert_in_order(prompt, *EXPECT[name][1])
    assert prompt.endswith(EXPECT[name][0])
    assert "get_weather" not in family(name).render(messages)


@pytest.mark.parametrize("name", sorted(FAMILY_TEMPLATES))
def test_family_tool_call_and_result(name):
    prompt = family(name).render(TOOL_ROUND, tools=[WEATHER_TOOL])
    assert_in_order(prompt, "Weather in Paris?", *EXPECT[name][2])
    assert '\\"city\\"' not in prompt  # arguments rendered as an object, never a quoted string


@pytest.mark.parametrize("name", sorted(FAMILY_TEMPLATES))
def test_family_accepts_dict_arguments_and_content_parts(name):
    call = {**CALL, "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "sunny"}]},
    ]
    prompt = family(name).render(messages, tools=[WEATHER_TOOL])
    assert_in_order(prompt, "Weather in Paris?", "get_weather", "Paris", "sunny")


# --- family specifics -------------------------------------------------------


def test_hermes_default_system_prompt():
    assert family("hermes").render(PLAIN).startswith(
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n")


def test_qwen3_enable_thinking_false_reaches_template():
    prompt = family("qwen3").render(PLAIN, extra={"enable_thinking": False})
    assert prompt.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert family("qwen3").render(PLAIN, extra={"enable_thinking": True}).endswith("<|im_start|>assistant\n<think>\n")


def test_qwen3_strips_reasoning_from_finished_turns():
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nsecret plan\n</think>\n\nHello!"},
        {"role": "assistant", "content": "Again", "reasoning_content": "more secrets"},
        {"role": "user", "content": "Bye"},
    ]
    prompt = family("qwen3").render(messages)
    assert "secret" not in prompt
    assert_in_order(prompt, "<|im_start|>assistant\nHello!<|im_end|>", "<|im_start|>assistant\nAgain<|im_end|>")


def test_qwen3_keeps_reasoning_inside_an_unfinished_tool_loop():
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "reasoning_content": "Need the tool.", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    prompt = family("qwen3").render(messages, tools=[WEATHER_TOOL])
    assert_in_order(prompt, "<|im_start|>assistant\n<think>\nNeed the tool.\n</think>\n\n<tool_call>", HERMES_RESULT)


def test_qwen3_coder_needs_object_arguments():
    call = {**CALL, "function": {"name": "get_weather", "arguments": "[1, 2]"}}
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]}]
    with pytest.raises(TemplateError, match="items"):
        family("qwen3_coder").render(messages)


def test_qwen3_coder_renders_nested_values_as_json():
    call = {**CALL, "function": {"name": "f", "arguments": '{"n": 3, "tags": ["a", "b"], "opt": {"k": true}}'}}
    prompt = family("qwen3_coder").render([{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [call]}])
    assert_in_order(prompt, "<function=f>", "<parameter=n>\n3\n</parameter>", '<parameter=tags>\n["a", "b"]\n</parameter>',
                    '<parameter=opt>\n{"k": true}\n</parameter>', "</function>")


def test_llama3_builtin_tools_use_python_tag():
    call = {"id": "c", "type": "function", "function": {"name": "brave_search", "arguments": '{"query": "paris"}'}}
    messages = [{"role": "user", "content": "Search"}, {"role": "assistant", "tool_calls": [call]}]
    prompt = family("llama3").render(messages, extra={"builtin_tools": ["brave_search"]})
    assert_in_order(prompt, "Environment: ipython\nTools: brave_search", '<|python_tag|>brave_search.call(query="paris")<|eom_id|>')


def test_llama3_raise_exception_reaches_caller():
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [CALL, {**CALL, "id": "call_2"}]}]
    with pytest.raises(TemplateError) as err:
        family("llama3").render_as_is(messages)
    assert str(err.value).startswith("This model only supports single tool-calls at once! (template line ")


def test_llama3_parallel_calls_become_one_turn_per_call():
    second = {**CALL, "id": "call_2", "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [CALL, second]},
                {"role": "tool", "tool_call_id": "call_2", "content": "rainy"},
                {"role": "tool", "tool_call_id": CALL["id"], "content": "sunny"}]
    prompt = family("llama3").render(messages)
    assert_in_order(prompt, '"Paris"', "sunny", '"Lyon"', "rainy")


def test_mistral_rejects_unknown_role():
    with pytest.raises(TemplateError, match="Only user, assistant and tool roles are supported"):
        family("mistral").render([{"role": "user", "content": "x"}, {"role": "critic", "content": "y"}])


def test_deepseek_r1_concatenates_the_clients_argument_text():
    call = {**CALL, "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [call]}]
    prompt = family("deepseek_r1").render(messages)
    assert '```json\n{"city":"Paris"}\n```' in prompt  # verbatim: the text the model generated
    # ... while a tojson template sees the object.
    assert '"arguments": {"city": "Paris"}' in family("hermes").render(messages)


def test_deepseek_r1_strips_reasoning_and_opens_think():
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "<think>hmm</think>Hello!"},
                {"role": "user", "content": "Bye"}]
    prompt = family("deepseek_r1").render(messages)
    assert "hmm" not in prompt
    assert prompt.endswith("<｜Assistant｜>Hello!<｜end▁of▁sentence｜><｜User｜>Bye<｜Assistant｜><think>\n")
    # Right after tool outputs the real template adds no generation prompt.
    assert family("deepseek_r1").render(TOOL_ROUND).endswith("<｜tool▁outputs▁end｜>")


def test_gpt_oss_reasoning_effort_date_and_analysis():
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "reasoning_content": "Use the tool.", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    with jinja_env.at_moment(datetime.datetime(2026, 12, 31, 23, 59, 59)):     # no midnight between render and check
        prompt = family("gpt_oss").render(messages, tools=[WEATHER_TOOL], extra={"reasoning_effort": "high"})
    assert_in_order(prompt, "Current date: 2026-12-31", "Reasoning: high",
                    "<|start|>assistant<|channel|>analysis<|message|>Use the tool.<|end|>",
                    "<|start|>assistant to=functions.get_weather", "<|call|>", "<|start|>functions.get_weather to=assistant")


# --- builtin templates, exactly ---------------------------------------------


def builtin(name: str, bos: str = "<bos>", eos: str = "<eos>") -> ChatTemplate:
    return ChatTemplate(f"builtin:{name}", BUILTIN_TEMPLATES[name], bos, eos)


def test_builtin_gemma_exact():
    messages = [SYSTEM[0], *PLAIN]
    assert builtin("gemma").render(messages) == (
        "<bos><start_of_turn>user\nBe brief.\n\nHi there<end_of_turn>\n"
        "<start_of_turn>model\nHello!<end_of_turn>\n"
        "<start_of_turn>user\nHow are you?<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    assert builtin("gemma").render([{"role": "user", "content": "  Hi \n"}], add_generation_prompt=False) == (
        "<bos><start_of_turn>user\nHi<end_of_turn>\n"
    )


def test_builtin_gemma_tools_exact():
    prompt = builtin("gemma").render(TOOL_ROUND, tools=[WEATHER_TOOL])
    assert prompt == (
        "<bos><start_of_turn>user\nBe brief.\n\n"
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + json.dumps(WEATHER_TOOL) + "\n</tools>\n\n"
        "For each function call, return a json object with function name and arguments within "
        "<tool_call></tool_call> XML tags:\n<tool_call>\n"
        '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n\n'
        "Weather in Paris?<end_of_turn>\n"
        "<start_of_turn>model\n" + HERMES_CALL + "<end_of_turn>\n"
        "<start_of_turn>user\n" + HERMES_RESULT + "<end_of_turn>\n"
        "<start_of_turn>model\n"
    )


def test_builtin_chatml_exact():
    messages = [SYSTEM[0], *PLAIN]
    assert builtin("chatml", bos="", eos="<|im_end|>").render(messages) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi there<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n"
        "<|im_start|>user\nHow are you?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert builtin("chatml").render(PLAIN[:1], add_generation_prompt=False) == "<|im_start|>user\nHi there<|im_end|>\n"


def test_builtin_chatml_tool_round_exact():
    messages = [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": "Checking.", "tool_calls": [CALL, {**CALL, "id": "call_2"}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "warm"},
    ]
    assert builtin("chatml").render(messages, add_generation_prompt=False) == (
        "<|im_start|>user\nWeather?<|im_end|>\n"
        "<|im_start|>assistant\nChecking.\n" + HERMES_CALL + "\n" + HERMES_CALL + "<|im_end|>\n"
        "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nwarm\n</tool_response><|im_end|>\n"
    )


# --- normalize_messages -------------------------------------------------------


def test_normalize_joins_text_parts_with_newline():
    out = normalize_messages([{"role": "user", "content": [
        {"type": "text", "text": "one"}, {"type": "input_text", "text": "two"}, "three"]}])
    assert out == [{"role": "user", "content": "one\ntwo\nthree"}]


def test_normalize_rejects_non_text_parts():
    with pytest.raises(TemplateError, match="image_url"):
        normalize_messages([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])


def test_normalize_content_and_none_fields():
    out = normalize_messages([
        {"role": "developer", "content": "rules", "name": None},
        {"role": "user"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "assistant", "content": "hi", "tool_calls": []},
        {"role": "assistant", "content": None, "tool_calls": None},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"},
        {"role": "assistant", "content": "x", "reasoning_content": "why"},
    ])
    assert out[0] == {"role": "system", "content": "rules"}
    assert out[1] == {"role": "user", "content": ""}
    assert out[2]["content"] == "" and len(out[2]["tool_calls"]) == 1   # the polyfill picks "" or None
    assert out[3] == {"role": "assistant", "content": "hi"}
    assert out[4] == {"role": "assistant", "content": ""}
    assert out[5] == {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "sunny"}
    assert out[6]["reasoning_content"] == "why"


def test_normalize_arguments():
    def args(value):
        call = {"id": "c", "function": {"name": "f", "arguments": value}}
        return normalize_messages([{"role": "assistant", "tool_calls": [call]}])[0]["tool_calls"][0]

    parsed = args('{"a":1}')
    assert parsed["type"] == "function"
    a = parsed["function"]["arguments"]
    assert isinstance(a, ToolArguments) and a == {"a": 1}
    assert str(a) == '{"a":1}' and "x" + a == 'x{"a":1}' and a + "y" == '{"a":1}y'
    assert json.dumps(a) == '{"a": 1}'
    d = args({"é": [1]})["function"]["arguments"]
    assert d == {"é": [1]} and str(d) == '{"é": [1]}'
    assert args("")["function"]["arguments"] == {} and str(args(None)["function"]["arguments"]) == "{}"
    assert args("not json") == {"id": "c", "type": "function", "function": {"name": "f", "arguments": "not json"}}
    assert args("[1]")["function"]["arguments"] == "[1]"


def test_normalize_does_not_mutate_and_is_idempotent():
    messages = [{"role": "assistant", "content": [{"type": "text", "text": "a"}], "tool_calls": [CALL]}]
    snapshot = json.dumps(messages)
    once = normalize_messages(messages)
    assert json.dumps(messages) == snapshot
    twice = normalize_messages(once)
    assert twice == once
    assert str(twice[0]["tool_calls"][0]["function"]["arguments"]) == '{"city": "Paris"}'


def test_normalize_rejects_bad_shapes():
    with pytest.raises(TemplateError):
        normalize_messages("hi")
    with pytest.raises(TemplateError):
        normalize_messages(["hi"])


# --- the environment ----------------------------------------------------------


def render(text: str, messages=PLAIN, tools=None, **kwargs) -> str:
    """The environment as it is, without the polyfill (these templates show nothing of tools)."""
    return ChatTemplate("test", text, "<s>", "</s>").render_as_is(messages, tools=tools or None, **kwargs)


def test_raise_exception_becomes_template_error_with_its_message():
    with pytest.raises(TemplateError) as err:
        render("{{ raise_exception('Conversation roles must alternate user/assistant') }}")
    assert str(err.value) == "Conversation roles must alternate user/assistant (template line 1)"


def test_template_errors_name_the_template_line():
    with pytest.raises(TemplateError, match=r"\(template line 3\).*ZeroDivisionError"):
        render("a\nb\n{{ 1 // 0 }}")
    with pytest.raises(TemplateError, match=r"\(template line 2\): 'dict object' has no attribute 'x'"):
        render("{% for m in messages %}\n{{ m.x.y }}{% endfor %}")


def test_a_template_may_change_its_own_lists_and_dicts():
    # as Kimi K2's template keeps a queue of call ids
    text = ("{% set ns = namespace(ids=[]) %}{% set d = {} %}{% for m in messages %}"
            "{% set _ = ns.ids.append(m.role) %}{% endfor %}{% set _ = d.update({'n': ns.ids | length}) %}"
            "{{ ns.ids.pop(0) }}|{{ ns.ids | join(',') }}|{{ d.n }}")
    assert render(text) == "user|assistant,user|3"


def test_tojson_takes_generators():
    # DeepSeek R1's template: tools | map(attribute='function') | tojson
    text = "{{ tools | map(attribute='function') | map(attribute='name') | tojson }}"
    assert render(text, tools=[WEATHER_TOOL]) == '["get_weather"]'


def test_syntax_error_is_template_error():
    with pytest.raises(TemplateError, match="syntax error on line 2"):
        render("ok\n{% for m in messages %}{{ m.content }")
    with pytest.raises(TemplateError):
        render("{% endfor %}")


@pytest.mark.parametrize("text", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ messages.__class__.__base__.__subclasses__() }}",
    "{{ raise_exception.__globals__ }}x{{ raise_exception.__globals__['os'] }}",
    "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "{% set _ = messages.append({'role': 'user'}) %}",
    "{% set _ = messages[0].update({'role': 'x'}) %}",
])
def test_sandbox_blocks_escapes_and_mutation(text):
    with pytest.raises(TemplateError, match="unsafe"):
        render(text)


def test_sandbox_unsafe_attribute_renders_nothing():
    assert render("[{{ ''.__class__ }}]") == "[]"


def test_python_errors_inside_templates_are_template_errors():
    with pytest.raises(TemplateError, match="ZeroDivisionError"):
        render("{{ 1 // 0 }}")
    with pytest.raises(TemplateError, match="chat template error"):
        render("{{ messages[0].content + 1 }}")
    with pytest.raises(TemplateError, match="undefined"):
        render("{{ nothing.here }}")


def test_tojson_matches_hugging_face():
    value = {"b": "é <tag> & 'q'", "a": [1, 2]}
    assert render("{{ v | tojson }}", extra={"v": value}) == json.dumps(value, ensure_ascii=False)
    assert render("{{ v | tojson(indent=2) }}", extra={"v": value}) == json.dumps(value, ensure_ascii=False, indent=2)
    assert render("{{ v | tojson(separators=(',', ':'), sort_keys=true) }}", extra={"v": value}) == (
        '{"a":[1,2],"b":"é <tag> & \'q\'"}')
    assert render("{{ v | tojson(ensure_ascii=true) }}", extra={"v": "é"}) == '"\\u00e9"'


def test_strftime_now_reads_the_wall_clock():
    before = datetime.datetime.now()
    shown = datetime.datetime.strptime(render("{{ strftime_now('%Y-%m-%d %H:%M:%S') }}"), "%Y-%m-%d %H:%M:%S")
    assert before.replace(microsecond=0) <= shown <= datetime.datetime.now()


TIME_SHOWN = "{{ strftime_now('%Y-%m-%d %H:%M:%S') }}|{{ datetime }}|{{ date_string }}"


def test_every_time_a_template_shows_is_the_moment_held():
    """strftime_now, firefunction's datetime and Llama 3's date_string: one moment, held across
    renders (the probes' and any compared with each other), a second or a year turning meanwhile."""
    moment = datetime.datetime(2026, 12, 31, 23, 59, 59, 999999)
    with jinja_env.at_moment(moment) as held:
        first = render(TIME_SHOWN)
        assert held == moment and render(TIME_SHOWN) == first
    assert first == "2026-12-31 23:59:59|2026-12-31 23:59:59|31 Dec 2026"
    assert jinja_env.now() != moment                    # the wall clock again after the block
    with jinja_env.at_moment() as held:                 # by default: the time on entering
        assert render(TIME_SHOWN).startswith(held.strftime("%Y-%m-%d %H:%M:%S|"))


def test_variables_and_extras_reach_the_template():
    text = ("{{ bos_token }}|{{ eos_token }}|{{ messages | length }}|{{ add_generation_prompt }}|"
            "{{ tools is none }}|{{ enable_thinking }}|{{ reasoning_effort }}")
    assert render(text, extra={"enable_thinking": False, "reasoning_effort": "low"}) == "<s>|</s>|3|True|True|False|low"
    assert render("{{ tools is none }}", tools=[]) == "True"  # no tools, as HF passes them
    assert render("{{ tools | length }}", tools=[WEATHER_TOOL]) == "1"
    assert render("{{ add_generation_prompt }}", add_generation_prompt=False) == "False"


@pytest.mark.parametrize("key", ["messages", "tools", "bos_token", "add_generation_prompt", "raise_exception"])
def test_extras_may_not_replace_template_variables(key):
    with pytest.raises(TemplateError, match=key):
        render("x", extra={key: 1})


def test_loopcontrols_and_generation_tag():
    text = ("{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
            "{% if m.role == 'assistant' %}{% generation %}[{{ m.content }}]{% endgeneration %}"
            "{% continue %}{% endif %}{{ m.content }};{% endfor %}")
    assert render(text) == "Hi there;[Hello!]"


def test_trim_and_lstrip_blocks():
    text = "{% for m in messages %}\n    {% if m.role == 'user' %}\n{{ m.content }}\n    {% endif %}\n{% endfor %}"
    assert render(text) == "Hi there\nHow are you?\n"


def test_compiled_template_is_cached():
    text = "{{ messages | length }} cached"
    render(text)
    assert jinja_env.compile_template(text) is jinja_env.compile_template(text)


# --- choose_template ------------------------------------------------------------


def choose(**kwargs) -> ChatTemplate:
    args = {"gguf_template": None, "architecture": "llama", "bos_token": "<s>", "eos_token": "</s>"}
    return choose_template(**{**args, **kwargs})


def test_choose_override_file_first(tmp_path):
    path = tmp_path / "t.jinja"
    path.write_text("FILE {{ messages | length }}", encoding="utf-8")
    t = choose(gguf_template="GGUF", override_path=str(path))
    assert t.source == f"file:{path}" and t.render(PLAIN) == "FILE 3"
    assert (t.bos_token, t.eos_token) == ("<s>", "</s>")


def test_choose_gguf_before_builtin():
    t = choose(gguf_template="GGUF", architecture="gemma3")
    assert t.source == "gguf:tokenizer.chat_template" and t.text == "GGUF"


@pytest.mark.parametrize("arch,name", [("gemma3", "gemma"), ("gemma2", "gemma"), ("gemma", "gemma"),
                                       ("llama", "chatml"), ("qwen2", "chatml"), ("", "chatml")])
def test_choose_builtin_by_architecture(arch, name):
    for gguf in (None, "", "  \n"):
        t = choose(gguf_template=gguf, architecture=arch)
        assert t.source == f"builtin:{name}" and t.text == BUILTIN_TEMPLATES[name]


def test_choose_unreadable_override_is_an_error(tmp_path):
    with pytest.raises(TemplateError, match="cannot read chat template file"):
        choose(override_path=str(tmp_path / "missing.jinja"))
    bad = tmp_path / "bad.jinja"
    bad.write_bytes(b"\xff\xfe\xfa")
    with pytest.raises(TemplateError, match="cannot read"):
        choose(override_path=str(bad))
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% if %}", encoding="utf-8")
    with pytest.raises(TemplateError, match="broken.jinja.*syntax error"):
        choose(override_path=str(broken))


def test_choose_falls_back_when_gguf_template_does_not_parse():
    t = choose(gguf_template="{% for %}", architecture="gemma3")
    assert t.source.startswith("builtin:gemma (tokenizer.chat_template not usable: chat template syntax error")
    assert t.text == BUILTIN_TEMPLATES["gemma"]


# Gemma 3's published template (google/gemma-3-*-it), for the builtin's plain-conversation output.
GEMMA3_PUBLISHED = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- if messages[0]['content'] is string -%}
        {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- else -%}
        {%- set first_user_prefix = messages[0]['content'][0]['text'] + '\\n\\n' -%}
    {%- endif -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- if (message['role'] == 'assistant') -%}
        {%- set role = "model" -%}
    {%- else -%}
        {%- set role = message['role'] -%}
    {%- endif -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {{ raise_exception("Invalid content type") }}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{'<start_of_turn>model\\n'}}
{%- endif -%}
"""


@pytest.mark.parametrize("messages", [
    PLAIN,
    [{"role": "system", "content": "Sys "}, {"role": "user", "content": " Hi "}, {"role": "assistant", "content": "Yo\n"}],
    [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_builtin_gemma_matches_gemma3_published_template(messages, add_generation_prompt):
    published = ChatTemplate("gemma3", GEMMA3_PUBLISHED, "<bos>", "<eos>")
    assert builtin("gemma").render(messages, add_generation_prompt=add_generation_prompt) == published.render(
        messages, add_generation_prompt=add_generation_prompt)
    with pytest.raises(TemplateError, match="Conversation roles must alternate"):
        published.render_as_is([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
