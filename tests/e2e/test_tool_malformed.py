"""A tool call whose JSON arguments turn malformed part way (`{"city":"Paris",,`), through the
official SDKs, streamed and not: the stream sends the arguments only up to where they stop being
JSON, always the start of a JSON object (the Anthropic SDK's messages.stream() reads every
input_json_delta with jiter's partial mode and raised on `,,`; openai-python's stream helpers read
strict tools' arguments the same way), and the call ends there: generation stops, what the model
would write after it is dropped, and the whole answer is the stream's. Chat Completions and
Responses: the arguments up to there (Responses' item "incomplete" in a completed response);
Anthropic's input and Ollama's arguments: the object they had begun; stop_reason "tool_use",
finish_reason "tool_calls", done_reason "stop".

The scripted model writes its call in pieces; the fourth breaks it."""

from __future__ import annotations

import jiter
import pytest

from clients import anthropic_sdk, ollama_client, openai_sdk
from conftest import ServerProcess
from scripted_model import write_scripted_gguf

CALL = ["<tool_call>", '{"name":"get_weather",', '"arguments":{"city":', '"Paris",,', '"days":3}}', "</tool_call>",
        "It is sunny."]
ARGUMENTS = '{"city":"Paris",'          # up to where the JSON broke
BEGUN = {"city": "Paris"}               # the object it had begun
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def server(models_dir):
    path = write_scripted_gguf(models_dir / "scripted-malformed-call.gguf", [CALL])
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def test_chat_completions(server):
    client = openai_sdk(server)
    kwargs = dict(model="scripted", messages=ASK, tools=TOOLS)
    choice = client.chat.completions.create(**kwargs).choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [("get_weather", ARGUMENTS)]

    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(**kwargs, stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            calls.setdefault(call.index, [call.function.name, ""])[1] += call.function.arguments or ""
            if calls[call.index][1]:        # as the SDK's helpers read them
                jiter.from_json(calls[call.index][1].encode(), partial_mode=True)
        finish = chunk.choices[0].finish_reason or finish
    assert (content, list(calls.values()), finish) == ("", [["get_weather", ARGUMENTS]], "tool_calls")

    with client.chat.completions.stream(**kwargs) as stream:       # the SDK's own stream helper
        final = stream.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls"
    assert [c.function.arguments for c in final.message.tool_calls] == [ARGUMENTS]


def test_responses(server):
    client = openai_sdk(server)
    tools = [{"type": "function", "name": "get_weather", "parameters": PARAMETERS, "strict": False}]
    kwargs = dict(model="scripted", input="Weather in Paris?", tools=tools)
    response = client.responses.create(**kwargs)
    assert response.status == "completed"
    [call] = response.output
    assert (call.type, call.name, call.arguments, call.status) == ("function_call", "get_weather", ARGUMENTS,
                                                                   "incomplete")
    events = list(client.responses.create(**kwargs, stream=True))
    assert not any(e.type == "response.output_text.delta" for e in events)
    assert "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta") == ARGUMENTS
    assert events[-1].type == "response.completed"
    [streamed] = events[-1].response.output
    assert streamed.model_dump(exclude={"id", "call_id"}) == call.model_dump(exclude={"id", "call_id"})


def test_anthropic_messages(server):
    client = anthropic_sdk(server)
    tools = [{"name": "get_weather", "input_schema": PARAMETERS}]
    kwargs = dict(model="scripted", max_tokens=64, messages=ASK, tools=tools)
    message = client.messages.create(**kwargs)
    assert message.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in message.content] == [("tool_use", "get_weather", BEGUN)]
    with client.messages.stream(**kwargs) as stream:      # the SDK reads the streamed input's partial JSON
        snapshots = [event.snapshot for event in stream if event.type == "input_json"]
        streamed = stream.get_final_message()
    assert snapshots and snapshots[-1] == BEGUN
    assert streamed.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in streamed.content] == [("tool_use", "get_weather", BEGUN)]


def test_ollama(server):
    client = ollama_client(server)
    reply = client.chat(model="scripted", messages=ASK, tools=TOOLS)
    assert reply.done_reason == "stop" and not reply.message.content
    assert [(c.function.name, c.function.arguments) for c in reply.message.tool_calls] == [("get_weather", BEGUN)]
    parts = list(client.chat(model="scripted", messages=ASK, tools=TOOLS, stream=True))
    assert "".join(p.message.content or "" for p in parts) == ""
    calls = [(c.function.name, c.function.arguments) for p in parts for c in p.message.tool_calls or []]
    assert calls == [("get_weather", BEGUN)] and parts[-1].done_reason == "stop"
