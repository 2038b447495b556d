"""The scripted test model (tests/support/scripted_model.py) behaves as scripted through the real engine:
it calls the tool on the first turn, answers after the tool result, and a replayed history
hits the prompt cache."""

from __future__ import annotations

import json

import pytest

from clients import openai_sdk
from conftest import ServerProcess
from scripted_model import tool_call_piece, tool_loop_script, write_scripted_gguf

ARGUMENTS = {"cmd": "touch made.txt"}
FINAL = "The file made.txt is there now."
REASONING = "I should run touch."
TOOLS = [{"type": "function", "function": {"name": "exec_command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]


@pytest.fixture(scope="module")
def server(models_dir, tmp_path_factory):
    path = write_scripted_gguf(models_dir / "scripted-loop.gguf", tool_loop_script(
        "exec_command", ARGUMENTS, FINAL, reasoning=REASONING))
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1",
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    return openai_sdk(server, api_key="x")


def first_turn(client, **options):
    messages = [{"role": "system", "content": "You are scripted."},
                {"role": "user", "content": "Please make a file."}]
    return messages, client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS, **options)


def test_first_turn_calls_the_tool_with_its_reasoning(client):
    _, reply = first_turn(client)   # default sampling (temperature 0.8): the margin makes it certain
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == [
        ("exec_command", ARGUMENTS)]
    assert message.model_extra.get("reasoning_content") == REASONING
    assert not message.content


def test_after_the_tool_result_it_answers_and_reuses_the_cache(client):
    messages, reply = first_turn(client, temperature=1.0)
    call = reply.choices[0].message.tool_calls[0]
    messages += [
        {"role": "assistant", "content": None, "reasoning_content": REASONING,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": ""},
    ]
    second = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == FINAL
    assert not second.choices[0].message.tool_calls
    # The history renders exactly as generated: everything up to the tool result is cached.
    generated = reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert second.usage.prompt_tokens_details.cached_tokens >= generated - 1


def test_streamed_turns_follow_the_script(client):
    stream = client.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hi"}], tools=TOOLS, stream=True)
    names, arguments = [], ""
    for chunk in stream:
        for call in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            if call.function.name:
                names.append(call.function.name)
            arguments += call.function.arguments or ""
    assert names == ["exec_command"] and json.loads(arguments) == ARGUMENTS


def test_an_unscripted_step_ends_the_turn_at_once(client):
    messages = [{"role": "user", "content": "x"}]
    for k in range(2):
        messages += [{"role": "assistant", "content": None, "tool_calls": [{
            "id": f"c{k}", "type": "function", "function": {"name": "exec_command", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": f"c{k}", "content": "ok"}]
    reply = client.chat.completions.create(model="scripted", messages=messages, max_tokens=20)
    assert reply.choices[0].message.content == "" and reply.usage.completion_tokens <= 1


def test_a_script_with_a_repeated_piece_is_refused(tmp_path):
    with pytest.raises(ValueError, match="twice"):
        write_scripted_gguf(tmp_path / "bad.gguf", [["A reply."], ["A reply."]])


def test_tool_call_piece_is_the_compact_json_localserve_returns():
    assert tool_call_piece("f", {"a": [1, "x y"]}) == '{"name":"f","arguments":{"a":[1,"x y"]}}'
