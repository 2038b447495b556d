"""Conformance over the real chat templates: for every template (its own call format, or the one
localserve's tools text teaches a template that shows no tools), the calls a model following its
template writes, forced through the real sampler with a grammar, come back as the calls and
nothing else; and a call forced through tool_choice (the server writes the grammar in the family
the template speaks) comes back as a proper tool call, whole and streamed, through Chat
Completions, Anthropic Messages and Responses alike.

One server serves every template: one tiny model file, a [models.NAME] table per template with
its chat-template-file, loaded on first use (milliseconds each).
"""

from __future__ import annotations

import json

import pytest

from clients import anthropic_sdk, openai_sdk
from conftest import ServerProcess
from template_calls import EXPECTED_FAMILIES, TOOLS, generated_calls
from template_corpus import corpus_dir, corpus_names
from tinymodel import write_tiny_gguf

from localserve.grammar.grammar import GrammarBuilder

NATIVE = corpus_names()
# One template per family, for what does not depend on the template's own words
REPRESENTATIVE = sorted({family: name for name, family in reversed(sorted(EXPECTED_FAMILIES.items()))
                         if name in NATIVE}.values())
OPENAI_TOOLS = [{"type": "function", "function": t} for t in TOOLS]
QUESTION = [{"role": "user", "content": "What is the weather in Paris?"}]
CTX = 8192


def _model_id(name: str) -> str:
    return "t-" + "".join(c if c.isalnum() else "-" for c in name)


@pytest.fixture(scope="module")
def corpus_server(models_dir, tmp_path_factory):
    # one attention head (64 wide): llama.cpp's CPU flash attention decodes 16-wide heads about
    # nine times slower, and these tests decode some 100k tokens, a character at a time
    model = write_tiny_gguf(models_dir / "tiny-corpus.gguf", context_length=CTX, n_head=1)
    folder = corpus_dir()
    config = tmp_path_factory.mktemp("corpus") / "models.toml"
    config.write_text("".join(
        f'[models.{_model_id(name)}]\npath = "{model}"\nchat-template-file = "{folder / (name + ".jinja")}"\n\n'
        for name in NATIVE))
    srv = ServerProcess(None, "--config", str(config), "--ctx-size", str(CTX), "--no-store")
    yield srv
    srv.stop()


def check_call(name: str, arguments: str) -> None:
    assert name == "get_weather"
    args = json.loads(arguments)
    assert set(args) == {"city", "days"}
    assert isinstance(args["city"], str) and isinstance(args["days"], int) and 1 <= args["days"] <= 7


def test_the_meta_names_the_family(corpus_server):
    client = openai_sdk(corpus_server, strict=False)
    for name in REPRESENTATIVE:
        client.chat.completions.create(model=_model_id(name), messages=QUESTION, max_tokens=1)
        meta = client.models.retrieve(_model_id(name)).model_extra.get("meta") or {}
        assert meta.get("tool_syntax") == EXPECTED_FAMILIES[name], name


@pytest.mark.parametrize("name", NATIVE)
def test_the_calls_a_model_following_its_template_writes_come_back(corpus_server, name):
    """The model made to write exactly a turn of calls as its template writes one (GigaChat 3's
    <|message_sep|> before its call, MiniMax-M3's bare </mm:think>, Apriel's calls in the reasoning
    its prompt opened, the taught templates' <tool_call>): the calls, and no markup as content or
    reasoning, whole and streamed."""
    text, expected = generated_calls(name)
    client = openai_sdk(corpus_server)
    ask = dict(model=_model_id(name), messages=QUESTION, tools=OPENAI_TOOLS, temperature=0, max_tokens=1000,
               extra_body={"grammar": "root ::= " + GrammarBuilder().literal(text)})
    reply = client.chat.completions.create(**ask)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls", text
    assert [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls] == expected, text
    assert not (message.content or "").strip() and not (message.model_extra.get("reasoning_content") or "").strip()

    text_seen, arguments, names = "", {}, {}
    for chunk in client.chat.completions.create(**ask, stream=True):
        for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            names[delta.index] = names.get(delta.index, "") + (delta.function.name or "")
            arguments[delta.index] = arguments.get(delta.index, "") + (delta.function.arguments or "")
        if chunk.choices:
            delta = chunk.choices[0].delta
            text_seen += (delta.content or "") + (delta.model_extra.get("reasoning_content") or "")
    assert [(names[i], json.loads(arguments[i])) for i in sorted(names)] == expected and not text_seen.strip()


@pytest.mark.parametrize("name", NATIVE)
def test_forced_call_comes_back_as_a_tool_call_whole_and_streamed(corpus_server, name):
    client = openai_sdk(corpus_server)
    choice = {"type": "function", "function": {"name": "get_weather"}}
    reply = client.chat.completions.create(model=_model_id(name), messages=QUESTION, tools=OPENAI_TOOLS,
                                           tool_choice=choice, temperature=0, max_tokens=1000)
    message = reply.choices[0]
    assert message.finish_reason == "tool_calls", message
    assert len(message.message.tool_calls) == 1 and not (message.message.content or "").strip()
    call = message.message.tool_calls[0]
    check_call(call.function.name, call.function.arguments)

    stream = client.chat.completions.create(model=_model_id(name), messages=QUESTION, tools=OPENAI_TOOLS,
                                            tool_choice=choice, temperature=0, max_tokens=1000, stream=True)
    content, fragments, names, finish = "", [], [], None
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or [] if chunk.choices else []:
            names += [delta.function.name] if delta.function.name else []
            fragments.append(delta.function.arguments or "")
        if chunk.choices:
            content += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and names == ["get_weather"] and not content.strip()
    assert "".join(fragments) == call.function.arguments       # temperature 0: the same call
    assert len([f for f in fragments if f]) >= 2               # two arguments: streamed, not at the end


@pytest.mark.parametrize("name", REPRESENTATIVE)
def test_a_required_call_of_any_tool(corpus_server, name):
    reply = openai_sdk(corpus_server).chat.completions.create(
        model=_model_id(name), messages=QUESTION, tools=OPENAI_TOOLS, tool_choice="required",
        parallel_tool_calls=False, temperature=0, max_tokens=1000)
    assert reply.choices[0].finish_reason == "tool_calls"
    [call] = reply.choices[0].message.tool_calls
    tool = next(t for t in TOOLS if t["name"] == call.function.name)
    assert set(json.loads(call.function.arguments)) <= set(tool["parameters"]["properties"])


@pytest.mark.parametrize("name", NATIVE)
def test_forced_call_through_anthropic_messages(corpus_server, name):
    client = anthropic_sdk(corpus_server)
    tools = [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in TOOLS]
    reply = client.messages.create(model=_model_id(name), max_tokens=1000, messages=QUESTION, tools=tools,
                                   tool_choice={"type": "tool", "name": "get_weather"}, extra_body={"temperature": 0})
    assert reply.stop_reason == "tool_use"
    uses = [b for b in reply.content if b.type == "tool_use"]
    assert len(uses) == 1
    check_call(uses[0].name, json.dumps(uses[0].input))
    with client.messages.stream(model=_model_id(name), max_tokens=1000, messages=QUESTION, tools=tools,
                                tool_choice={"type": "tool", "name": "get_weather"},
                                extra_body={"temperature": 0}) as stream:
        final = stream.get_final_message()
    assert [b.input for b in final.content if b.type == "tool_use"] == [uses[0].input]


@pytest.mark.parametrize("name", NATIVE)
def test_forced_call_through_responses(corpus_server, name):
    client = openai_sdk(corpus_server)
    tools = [{"type": "function", **t} for t in TOOLS]
    reply = client.responses.create(model=_model_id(name), input="What is the weather in Paris?", tools=tools,
                                    tool_choice={"type": "function", "name": "get_weather"}, temperature=0,
                                    max_output_tokens=1000)
    calls = [item for item in reply.output if item.type == "function_call"]
    assert len(calls) == 1
    check_call(calls[0].name, calls[0].arguments)
    deltas, done = [], None
    for event in client.responses.create(model=_model_id(name), input="What is the weather in Paris?",
                                         tools=tools, tool_choice={"type": "function", "name": "get_weather"},
                                         temperature=0, max_output_tokens=1000, stream=True):
        if event.type == "response.function_call_arguments.delta":
            deltas.append(event.delta)
        elif event.type == "response.function_call_arguments.done":
            done = event.arguments
    assert done == calls[0].arguments == "".join(deltas)
