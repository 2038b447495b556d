"""Tool calling, reasoning and constrained output end to end, per model family.

Each family gets a tiny model carrying a template in its style and its markers as
special tokens; calls are forced through the real sampler with tool_choice (the
server builds the grammar in the family's own syntax) or an explicit grammar.
"""

from __future__ import annotations

import json

import openai
import pytest

from clients import openai_sdk
from conftest import ServerProcess
from family_servers import MESSAGES, TOOL_FAMILIES, TOOLS, FamilyServers, check_weather_arguments, template_for
from family_templates import write_family_gguf
from rawhttp import post_json, request
from tinymodel import token_ids

from localserve.grammar.grammar import tool_call_grammar

@pytest.fixture(scope="module")
def families(models_dir):
    servers = FamilyServers(models_dir)
    yield servers
    servers.stop()


def collect_stream(stream):
    content, calls, finish = "", {}, None
    for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        content += choice.delta.content or ""
        for delta in choice.delta.tool_calls or []:
            if delta.index not in calls:
                assert delta.id and delta.function.name and delta.type == "function"
                calls[delta.index] = {"id": delta.id, "name": delta.function.name, "arguments": ""}
            else:
                assert delta.id is None and delta.function.name is None
            calls[delta.index]["arguments"] += delta.function.arguments or ""
        finish = choice.finish_reason or finish
    return content, [calls[i] for i in sorted(calls)], finish


@pytest.mark.parametrize("syntax", [s for s in TOOL_FAMILIES if template_for(s)])
def test_syntax_is_recognised_from_the_template(families, syntax):
    srv = families.get(template_for(syntax))
    assert srv.wait_log(f"tool syntax {syntax}")


@pytest.mark.parametrize("syntax", TOOL_FAMILIES)
def test_forced_call_parses_whole_and_streamed(families, syntax):
    client = openai_sdk(families.for_syntax(syntax), api_key="x")
    choice = {"type": "function", "function": {"name": "get_weather"}}
    reply = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice=choice,
                                           temperature=0, max_tokens=1000)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls", message
    assert len(message.tool_calls) == 1
    call = message.tool_calls[0]
    assert call.id and call.function.name == "get_weather"      # Mistral ids are 9 alphanumerics
    check_weather_arguments(call.function.arguments)

    stream = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice=choice,
                                            temperature=0, max_tokens=1000, stream=True)
    content, calls, finish = collect_stream(stream)
    assert finish == "tool_calls" and len(calls) == 1
    assert calls[0]["name"] == "get_weather"
    assert calls[0]["arguments"] == call.function.arguments      # same forced output, same fragments
    check_weather_arguments(calls[0]["arguments"])


@pytest.mark.parametrize("family", ["hermes", "mistral", "qwen3_coder"])
def test_required_can_make_parallel_calls_and_text_before_a_call_is_content(families, family):
    client = families.client(family)
    grammar = tool_call_grammar(family, [t["function"] for t in TOOLS], parallel=False,
                                forced_name="get_time", prefix="Let me look. ")
    for stream in (False, True):
        reply = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=0,
                                               max_tokens=1000, stream=stream, extra_body={"grammar": grammar})
        if stream:
            content, calls, finish = collect_stream(reply)
        else:
            message = reply.choices[0].message
            content, finish = message.content, reply.choices[0].finish_reason
            calls = [{"name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls]
        assert content.strip() == "Let me look."
        assert finish == "tool_calls" and [c["name"] for c in calls] == ["get_time"]
        assert set(json.loads(calls[0]["arguments"])) == {"zone"}


def test_parallel_false_stops_after_the_first_call(families):
    client = families.client("hermes")
    call = '<tool_call>\\n{\\"name\\": \\"get_time\\", \\"arguments\\": {\\"zone\\": \\"UTC\\"}}\\n</tool_call>'
    grammar = f'root ::= "{call}" "\\n" "{call}" " and then a long tail of text that is never generated"'
    reply = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=0,
                                           parallel_tool_calls=False, max_tokens=1000,
                                           extra_body={"grammar": grammar})
    assert reply.choices[0].finish_reason == "tool_calls"
    assert len(reply.choices[0].message.tool_calls) == 1
    parallel = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=0,
                                              max_tokens=1000, extra_body={"grammar": grammar})
    assert len(parallel.choices[0].message.tool_calls) == 2
    # generation was cut at the first call's end: well under half of the whole forced text
    assert reply.usage.completion_tokens * 2 < parallel.usage.completion_tokens


def test_an_unknown_call_comes_back_as_content_and_one_broken_after_its_name_as_a_call(families):
    client = families.client("hermes")

    def forced(text, **options):
        return client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, temperature=0,
                                              max_tokens=100, extra_body={"grammar": f'root ::= "{text}"'}, **options)

    reply = forced('<tool_call>{\\"name\\": \\"nope\\", \\"arguments\\": {}}</tool_call>')
    message = reply.choices[0].message
    assert not message.tool_calls and reply.choices[0].finish_reason == "stop"
    assert "<tool_call>" in message.content
    # its start went out as a call: a call it stays, with what it got up to where its JSON broke, streamed
    # or not (never content too)
    broken = '<tool_call>{\\"name\\": \\"get_time\\", \\"arguments\\": {broken</tool_call>'
    reply = forced(broken)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls" and not message.content
    assert [(c.function.name, c.function.arguments) for c in message.tool_calls] == [("get_time", "{")]
    content, calls, finish = collect_stream(forced(broken, stream=True))
    assert (content, [(c["name"], c["arguments"]) for c in calls], finish) == (
        "", [("get_time", "{")], "tool_calls")


def test_tool_choice_none_neither_renders_nor_parses(families):
    srv = families.get("hermes")
    rendered = request(srv.port, post_json("/apply-template", {"messages": MESSAGES, "tools": TOOLS})).json()
    assert "get_weather" in rendered["prompt"]
    client = families.client("hermes")
    call = '<tool_call>{\\"name\\": \\"get_time\\", \\"arguments\\": {\\"zone\\": \\"UTC\\"}}</tool_call>'
    reply = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, tool_choice="none",
                                           temperature=0, extra_body={"grammar": f'root ::= "{call}"'})
    assert not reply.choices[0].message.tool_calls
    assert reply.usage.prompt_tokens < client.chat.completions.create(
        model="m", messages=MESSAGES, tools=TOOLS, max_tokens=1).usage.prompt_tokens


def test_tool_round_trip_through_the_template(families):
    client = families.client("hermes")
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 1, "unit": "C"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    srv = families.get("hermes")
    prompt = request(srv.port, post_json("/apply-template", {"messages": history, "tools": TOOLS})).json()["prompt"]
    assert '"city": "Paris"' in prompt and "sunny, 21 C" in prompt
    reply = client.chat.completions.create(model="m", messages=history, tools=TOOLS, max_tokens=3)
    assert reply.usage.completion_tokens <= 3


# ---- reasoning ----------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_when_the_template_opens_think(families, stream, models_dir):
    srv = families.servers.get("qwen3")
    if srv is None:
        path = write_family_gguf(models_dir / "tiny-qwen3.gguf", "qwen3")
        srv = families.servers["qwen3"] = ServerProcess(path, "--no-store")
    client = openai_sdk(srv, api_key="x")
    grammar = 'root ::= "I should greet them." "</think>" "\\n\\n" "Hello there!"'
    reply = client.chat.completions.create(model="m", messages=MESSAGES, stream=stream,
                                           extra_body={"grammar": grammar})
    if stream:
        reasoning, content = "", ""
        for chunk in reply:
            if chunk.choices:
                delta = chunk.choices[0].delta
                reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
                content += delta.content or ""
    else:
        message = reply.choices[0].message
        reasoning, content = message.model_extra["reasoning_content"], message.content
    assert reasoning == "I should greet them."
    assert content == "Hello there!"


@pytest.mark.parametrize("stream", [False, True])
def test_reasoning_in_a_tool_call_turn_is_kept_apart_from_the_call(families, stream, models_dir):
    srv = families.servers.get("qwen3")
    if srv is None:
        path = write_family_gguf(models_dir / "tiny-qwen3.gguf", "qwen3")
        srv = families.servers["qwen3"] = ServerProcess(path, "--no-store")
    client = openai_sdk(srv, api_key="x")
    call = '<tool_call>\\n{\\"name\\": \\"get_time\\", \\"arguments\\": {\\"zone\\": \\"UTC\\"}}\\n</tool_call>'
    grammar = f'root ::= "I need the time." "</think>" "\\n\\n" "{call}"'
    reply = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS, stream=stream,
                                           extra_body={"grammar": grammar})
    if stream:
        reasoning = ""
        for chunk in reply:
            if chunk.choices:
                reasoning += (chunk.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
        reply = client.chat.completions.create(model="m", messages=MESSAGES, tools=TOOLS,
                                               extra_body={"grammar": grammar})
        assert reasoning == "I need the time."
    message = reply.choices[0].message
    assert message.model_extra["reasoning_content"] == "I need the time."
    assert not message.content
    assert [c.function.name for c in message.tool_calls] == ["get_time"]
    assert json.loads(message.tool_calls[0].function.arguments) == {"zone": "UTC"}
    assert reply.choices[0].finish_reason == "tool_calls"


def test_reasoning_opened_by_the_model(openai_client):
    # the conftest model has <think> in its vocabulary but a template that never mentions it
    client = openai_client
    reply = client.chat.completions.create(model="m", messages=MESSAGES, extra_body={
        "grammar": 'root ::= "<think>" "plan it" "</think>" "The answer."'})
    message = reply.choices[0].message
    assert message.model_extra.get("reasoning_content") == "plan it"
    assert message.content == "The answer."
    assert reply.usage.completion_tokens_details.reasoning_tokens > 0


def test_harmony_analysis_channel_is_reasoning(families):
    client = families.client("gpt_oss")
    grammar = ('root ::= "<|channel|>analysis<|message|>" "think first" "<|end|>" '
               '"<|start|>assistant<|channel|>final<|message|>" "Hi!"')
    reply = client.chat.completions.create(model="m", messages=MESSAGES, extra_body={"grammar": grammar},
                                           reasoning_effort="low")
    message = reply.choices[0].message
    assert message.model_extra.get("reasoning_content") == "think first"
    assert message.content == "Hi!"


# ---- constrained output -------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
    "score": {"type": "integer", "minimum": 0, "maximum": 100}},
    "required": ["name", "tags", "score"], "additionalProperties": False}


def test_json_schema_output_validates(openai_client):
    for seed in (1, 2, 3):
        reply = openai_client.chat.completions.create(
            model="m", messages=MESSAGES, temperature=1.0, seed=seed, max_tokens=300,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA, "strict": True}})
        value = json.loads(reply.choices[0].message.content)
        assert set(value) == {"name", "tags", "score"} and 0 <= value["score"] <= 100
        assert isinstance(value["tags"], list) and len(value["tags"]) <= 3


def test_json_object_output_parses(openai_client):
    close = str(token_ids()["}"])       # nudge the random model to close the object
    reply = openai_client.chat.completions.create(model="m", messages=MESSAGES, max_tokens=1000, seed=5,
                                                  logit_bias={close: 5}, response_format={"type": "json_object"})
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content), dict)


def test_invalid_schema_is_400(openai_client):
    with pytest.raises(openai.BadRequestError):
        openai_client.chat.completions.create(
            model="m", messages=MESSAGES,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "strnig"}}})


def test_qwen3_coder_values_follow_the_parameter_types(families):
    client = families.client("qwen3_coder")
    tool = {"type": "function", "function": {"name": "note", "parameters": {
        "type": "object", "properties": {"text": {"type": ["string", "null"], "maxLength": 6},
                                         "count": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["text", "count"]}}}
    for seed in (1, 2, 3):
        reply = client.chat.completions.create(model="m", messages=MESSAGES, tools=[tool], tool_choice="required",
                                               temperature=1.0, seed=seed, max_tokens=400)
        args = json.loads(reply.choices[0].message.tool_calls[0].function.arguments)
        assert isinstance(args["count"], int)
        # the grammar writes a nullable string as JSON ("abc" or null); the parser reads it back by its type
        assert args["text"] is None or (isinstance(args["text"], str) and not args["text"].startswith('"'))
