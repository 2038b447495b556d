"""A tool call cut off by max_tokens, through the official SDKs, streamed and not: it comes back
once, as a call with the arguments it got (never its markup as content after it), the same
streamed and whole, as OpenAI sends one: Chat Completions' partial arguments and
finish_reason "length"; Responses' function_call item "incomplete" in a response incomplete for
max_output_tokens; Anthropic's tool_use input and Ollama's arguments the object the partial
JSON had begun, stop_reason "max_tokens" / done_reason "length". A stop string inside the call
cuts it the same way (finish_reason "tool_calls", as llama-server says it).

The scripted model writes its call in five tokens; four of them cut it after `"Paris",`.
"""

from __future__ import annotations

import pytest

from clients import anthropic_sdk, ollama_client, openai_sdk
from conftest import ServerProcess
from scripted_model import write_scripted_gguf

CALL = ["<tool_call>", '{"name":"get_weather",', '"arguments":{"city":', '"Paris",', '"days":3}}', "</tool_call>"]
CUT = 4                                 # tokens: the call's start, its name, two pieces of arguments
ARGUMENTS = '{"city":"Paris",'          # what the call got
BEGUN = {"city": "Paris"}               # the object it had begun
PARAMETERS = {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMETERS}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


@pytest.fixture(scope="module")
def server(models_dir):
    path = write_scripted_gguf(models_dir / "scripted-cut-call.gguf", [CALL])
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def test_chat_completions(server):
    client = openai_sdk(server)
    choice = client.chat.completions.create(model="scripted", messages=ASK, tools=TOOLS, max_tokens=CUT).choices[0]
    assert choice.finish_reason == "length" and not choice.message.content
    assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [("get_weather", ARGUMENTS)]

    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(model="scripted", messages=ASK, tools=TOOLS, max_tokens=CUT,
                                                stream=True):
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for call in delta.tool_calls or []:
            calls.setdefault(call.index, [call.function.name, ""])[1] += call.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert (content, list(calls.values()), finish) == ("", [["get_weather", ARGUMENTS]], "length")


def test_responses(server):
    client = openai_sdk(server)
    tools = [{"type": "function", "name": "get_weather", "parameters": PARAMETERS, "strict": False}]
    kwargs = dict(model="scripted", input="Weather in Paris?", tools=tools, max_output_tokens=CUT)
    response = client.responses.create(**kwargs)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    [call] = response.output
    assert (call.type, call.name, call.arguments, call.status) == ("function_call", "get_weather", ARGUMENTS,
                                                                   "incomplete")
    events = list(client.responses.create(**kwargs, stream=True))
    assert not any(e.type == "response.output_text.delta" for e in events)
    assert "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta") == ARGUMENTS
    assert events[-1].type == "response.incomplete"
    [streamed] = events[-1].response.output
    assert streamed.model_dump(exclude={"id", "call_id"}) == call.model_dump(exclude={"id", "call_id"})


def test_anthropic_messages(server):
    client = anthropic_sdk(server)
    tools = [{"name": "get_weather", "input_schema": PARAMETERS}]
    kwargs = dict(model="scripted", max_tokens=CUT, messages=ASK, tools=tools)
    message = client.messages.create(**kwargs)
    assert message.stop_reason == "max_tokens"
    assert [(b.type, b.name, b.input) for b in message.content] == [("tool_use", "get_weather", BEGUN)]
    with client.messages.stream(**kwargs) as stream:      # the SDK reads the streamed input's partial JSON
        streamed = stream.get_final_message()
    assert streamed.stop_reason == "max_tokens"
    assert [(b.type, b.name, b.input) for b in streamed.content] == [("tool_use", "get_weather", BEGUN)]


def test_ollama(server):
    client = ollama_client(server)
    reply = client.chat(model="scripted", messages=ASK, tools=TOOLS, options={"num_predict": CUT})
    assert reply.done_reason == "length" and not reply.message.content
    assert [(c.function.name, c.function.arguments) for c in reply.message.tool_calls] == [("get_weather", BEGUN)]
    parts = list(client.chat(model="scripted", messages=ASK, tools=TOOLS, options={"num_predict": CUT}, stream=True))
    assert "".join(p.message.content or "" for p in parts) == ""
    calls = [(c.function.name, c.function.arguments) for p in parts for c in p.message.tool_calls or []]
    assert calls == [("get_weather", BEGUN)] and parts[-1].done_reason == "length"


def test_a_stop_string_inside_the_call_cuts_it_the_same_way(server):
    client = openai_sdk(server)
    kwargs = dict(model="scripted", messages=ASK, tools=TOOLS, stop=['"days"'])
    choice = client.chat.completions.create(**kwargs).choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [("get_weather", ARGUMENTS)]
    streamed = "".join(call.function.arguments or "" for chunk in client.chat.completions.create(**kwargs, stream=True)
                       for call in chunk.choices[0].delta.tool_calls or [])
    assert streamed == ARGUMENTS
