"""Ollama's own API through the official `ollama` Python client, sync and async, strict types
(pydantic models), against the real server on tiny generated models: a catalogue of a ChatML
tiny model and a scripted model that thinks, calls a tool, then answers after its result."""

from __future__ import annotations

import asyncio
import json
import shutil

import numpy as np
import ollama
import pytest

from clients import ollama_async_client, ollama_client, openai_sdk
from conftest import ServerProcess
from scripted_model import tool_loop_script, write_scripted_gguf
from tinymodel import NO_EOG

ARGUMENTS = {"cmd": "touch made.txt"}
FINAL = "The file made.txt is there now."
REASONING = "I should run touch."
TOOLS = [{"type": "function", "function": {"name": "exec_command", "description": "run a command", "parameters": {
    "type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}]
ASK = [{"role": "user", "content": "Please make a file."}]
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
          "required": ["n", "ok"], "additionalProperties": False}


@pytest.fixture(scope="module")
def server(tiny_model, models_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ollama-catalogue")
    shutil.copy(tiny_model, folder / "tiny.gguf")
    write_scripted_gguf(folder / "scripted.gguf", tool_loop_script("exec_command", ARGUMENTS, FINAL,
                                                                  reasoning=REASONING))
    srv = ServerProcess(None, "--models-dir", str(folder), "--slots", "2",
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    return ollama_client(server)


def test_list_names_every_model_with_its_tag(client):
    listed = client.list()
    assert sorted(m.model for m in listed.models) == ["scripted:latest", "tiny:latest"]
    for model in listed.models:
        assert model.size > 0 and len(model.digest) == 64 and model.details.format == "gguf"


def test_show_tells_what_the_model_can_do(client):
    shown = client.show("scripted")
    assert {"completion", "tools", "thinking"} <= set(shown.capabilities)
    assert shown.modelinfo["general.architecture"] == "llama"
    assert isinstance(shown.modelinfo["llama.context_length"], int) and shown.modelinfo["llama.context_length"] > 0
    assert shown.details.family == "llama" and shown.details.parameter_size
    assert "tools" not in client.show("tiny:latest").capabilities     # ChatML without tools in its template


def test_chat_returns_the_tool_call_with_object_arguments_and_the_thinking(client):
    reply = client.chat(model="scripted", messages=ASK, tools=TOOLS)
    assert reply.done and reply.done_reason == "stop"
    assert [(c.function.name, dict(c.function.arguments)) for c in reply.message.tool_calls] == [
        ("exec_command", ARGUMENTS)]
    assert reply.message.thinking == REASONING
    assert not reply.message.content
    assert reply.prompt_eval_count > 0 and reply.eval_count > 0
    assert reply.total_duration >= reply.eval_duration > 0


def test_streamed_chat_carries_the_call_whole_in_one_line(client):
    parts = list(client.chat(model="scripted:latest", messages=ASK, tools=TOOLS, stream=True))
    calls = [p.message.tool_calls for p in parts if p.message.tool_calls]
    assert len(calls) == 1 and [(c.function.name, dict(c.function.arguments)) for c in calls[0]] == [
        ("exec_command", ARGUMENTS)]
    assert "".join(p.message.thinking or "" for p in parts) == REASONING
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True]
    assert parts[-1].done_reason == "stop" and parts[-1].eval_count > 0


def test_the_tool_result_gets_the_answer(client):
    first = client.chat(model="scripted", messages=ASK, tools=TOOLS, think=True)
    messages = ASK + [first.message, {"role": "tool", "tool_name": "exec_command", "content": "done"}]
    second = client.chat(model="scripted", messages=messages, tools=TOOLS)
    assert second.message.content == FINAL and not second.message.tool_calls


def test_tagged_names_reach_the_openai_endpoints_too(server):
    """Copilot Chat lists models through /api/tags, then chats through /v1/chat/completions."""
    reply = openai_sdk(server).chat.completions.create(model="scripted:latest", messages=ASK, tools=TOOLS)
    assert reply.choices[0].finish_reason == "tool_calls"
    assert reply.model == "scripted"


def test_chat_format_schema_holds_the_answer_to_it(client):
    reply = client.chat(model="tiny", messages=[{"role": "user", "content": "give"}], format=SCHEMA,
                        options={"temperature": 0.7, "seed": 3, "num_predict": 200})
    value = json.loads(reply.message.content)
    assert set(value) == {"n", "ok"} and isinstance(value["n"], int) and isinstance(value["ok"], bool)


def test_generate_streams_and_answers_whole(client):
    options = {"num_predict": 6, "temperature": 0, "logit_bias": NO_EOG}
    whole = client.generate(model="tiny", prompt="hello", options=options)
    assert whole.done and whole.done_reason == "length" and whole.eval_count == 6 and whole.context == []
    parts = list(client.generate(model="tiny", prompt="hello", stream=True, options=options))
    assert "".join(p.response for p in parts) == whole.response
    assert parts[-1].done and parts[-1].done_reason == "length"


def test_generate_raw_with_format_schema(client):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    reply = client.generate(model="tiny", prompt="{", raw=True, format=schema, system="ignored when raw",
                            options={"num_predict": 200, "seed": 1})
    assert reply.done_reason == "stop" and isinstance(json.loads(reply.response)["ok"], bool)


def test_embed_and_the_older_embeddings(client):
    reply = client.embed(model="tiny", input=["one text", "another"])
    assert len(reply.embeddings) == 2 and reply.prompt_eval_count > 0
    assert all(abs(np.linalg.norm(v) - 1.0) < 1e-4 for v in reply.embeddings)
    assert len(client.embed(model="tiny", input="short", dimensions=8).embeddings[0]) == 8
    assert len(client.embeddings(model="tiny", prompt="one text").embedding) == len(reply.embeddings[0])


def test_pull_of_a_catalogue_model_succeeds_and_of_another_fails(client):
    assert [p.status for p in client.pull("tiny", stream=True)][-1] == "success"
    assert client.pull("tiny:latest").status == "success"
    with pytest.raises(ollama.ResponseError) as caught:
        client.pull("llama3.2:1b")
    assert caught.value.status_code == 404 and "catalogue" in caught.value.error


def test_empty_prompt_loads_and_keep_alive_zero_unloads(client):
    assert client.generate(model="tiny", prompt="").done_reason == "load"
    assert "tiny:latest" in [m.model for m in client.ps().models]
    assert client.chat(model="tiny", messages=[], keep_alive=0).done_reason == "unload"
    assert "tiny:latest" not in [m.model for m in client.ps().models]
    assert client.chat(model="tiny", messages=[]).done_reason == "load"
    running = {m.model: m for m in client.ps().models}
    assert running["tiny:latest"].context_length > 0 and running["tiny:latest"].size > 0


@pytest.mark.parametrize("call, status, words", [
    (lambda c: c.chat(model="nope:7b", messages=ASK), 404, "nope:7b"),
    (lambda c: c.chat(model="tiny", messages=ASK, options={"temperature": "hot"}), 400, "options.temperature"),
    (lambda c: c.chat(model="tiny", messages=ASK, options={"num_predict": 1.5}), 400, "options.num_predict"),
    (lambda c: c.chat(model="tiny", messages=ASK, think="extreme"), 400, "think"),
    (lambda c: c.chat(model="tiny", messages=[{"role": "robot", "content": "x"}]), 400, "messages[0].role"),
    (lambda c: c.chat(model="tiny", messages=[{"role": "user", "content": "x", "images": [b"\x89PNG"]}]), 400,
     "messages[0].images"),
    (lambda c: c.generate(model="tiny", prompt="x", suffix="y"), 400, "suffix"),
    (lambda c: c.generate(model="tiny", prompt="x", format={"type": "object", "properties": 5}), 400, "format"),
    (lambda c: c.embed(model="tiny", input="x", dimensions=100000), 400, "dimensions"),
    (lambda c: c.push("tiny"), 400, "push"),
    (lambda c: c.create("mine", from_="tiny"), 400, "create"),
    (lambda c: c.copy("tiny", "other"), 400, "copy"),
    (lambda c: c.delete("tiny"), 400, "not deleted"),
    (lambda c: c.delete("absent"), 404, "absent"),
])
def test_errors_in_ollamas_shape(client, call, status, words):
    with pytest.raises(ollama.ResponseError) as caught:
        result = call(client)
        list(result) if not isinstance(result, ollama.SubscriptableBaseModel) else None
    assert caught.value.status_code == status
    assert words in caught.value.error


def test_the_async_client(server):
    async def session():
        client = ollama_async_client(server)
        listed = await client.list()
        reply = await client.chat(model="scripted", messages=ASK, tools=TOOLS)
        parts = [p async for p in await client.generate(model="tiny", prompt="hi", stream=True,
                                                          options={"num_predict": 3, "logit_bias": NO_EOG})]
        return listed, reply, parts

    listed, reply, parts = asyncio.run(session())
    assert "scripted:latest" in [m.model for m in listed.models]
    assert dict(reply.message.tool_calls[0].function.arguments) == ARGUMENTS
    assert parts[-1].done and parts[-1].eval_count == 3
