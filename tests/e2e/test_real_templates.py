"""Real chat templates behind the server: an agent's tool loop renders in every dialect.

A tiny model is served with a real template from llama.cpp's corpus (--chat-template-file), and
each dialect is sent the second turn of a tool loop: calls with null content, parallel calls,
their results, a system prompt. Without the probe and its polyfills these are 400 template_error
(Qwen3 and gpt-oss on null content, Mistral on call ids, Llama 3.x on parallel calls, gemma-2 on
the system role). The prompts' contents are checked at unit level (test_template_corpus.py);
here the server path itself, the ids each dialect makes, and the probe's findings in /v1/models.
"""

from __future__ import annotations

import pytest

from clients import anthropic_sdk, openai_sdk
from conftest import ServerProcess
from rawhttp import post_json, request
from template_corpus import corpus_dir
from tinymodel import NO_EOG, write_tiny_gguf

TEMPLATES = ["Qwen-Qwen3-0.6B", "openai-gpt-oss-120b", "Mistral-Small-3.2-24B-Instruct-2506",
             "meta-llama-Llama-3.1-8B-Instruct", "google-gemma-2-2b-it"]

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "the city"}},
                   "required": ["city"]}}}


def get(port: int, path: str):
    return request(port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())


class TemplateServers:
    def __init__(self, models_dir):
        self.model = write_tiny_gguf(models_dir / "tiny-long.gguf", context_length=8192)
        self.servers: dict[str, ServerProcess] = {}

    def get(self, name: str) -> ServerProcess:
        if name not in self.servers:
            self.servers[name] = ServerProcess(self.model, "--model-id", "m", "--no-store", "--ctx-size", "8192",
                                               "--chat-template-file", str(corpus_dir() / f"{name}.jinja"))
        return self.servers[name]

    def stop(self):
        for srv in self.servers.values():
            srv.stop()


@pytest.fixture(scope="module")
def servers(models_dir):
    found = TemplateServers(models_dir)
    yield found
    found.stop()


def chat_tool_loop(null_content: bool) -> list[dict]:
    calls = [{"id": "call_Paris0001", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
             {"id": "call_Lyon00002", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"city": "Lyon"}'}}]
    return [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris and Lyon?"},
            {"role": "assistant", "content": None if null_content else "", "tool_calls": calls},
            {"role": "tool", "tool_call_id": "call_Paris0001", "content": "sunny"},
            {"role": "tool", "tool_call_id": "call_Lyon00002", "content": "rainy"}]


@pytest.mark.parametrize("name", TEMPLATES)
def test_chat_completions_tool_loop(servers, name):
    client = openai_sdk(servers.get(name), api_key="x")
    for null_content in (True, False):
        reply = client.chat.completions.create(model="m", messages=chat_tool_loop(null_content), tools=[WEATHER],
                                               max_tokens=2, logit_bias=NO_EOG)
        assert reply.choices[0].finish_reason in ("length", "stop", "tool_calls")


@pytest.mark.parametrize("name", TEMPLATES)
def test_anthropic_messages_tool_loop(servers, name):
    client = anthropic_sdk(servers.get(name))
    tool = {"name": "get_weather", "description": "Weather for a city",
            "input_schema": WEATHER["function"]["parameters"]}
    messages = [{"role": "user", "content": "Weather in Paris and Lyon?"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                     "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_01B19q90qw90lq917835lq8", "name": "get_weather",
                     "input": {"city": "Lyon"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A09q90qw90lq917835lq9", "content": "sunny"},
                    {"type": "tool_result", "tool_use_id": "toolu_01B19q90qw90lq917835lq8", "content": "rainy"}]}]
    reply = client.messages.create(model="m", max_tokens=2, system="Be brief.", tools=[tool], messages=messages)
    assert reply.stop_reason in ("max_tokens", "end_turn", "tool_use")


@pytest.mark.parametrize("name", TEMPLATES)
def test_responses_tool_loop(servers, name):
    client = openai_sdk(servers.get(name), api_key="x")
    items = [{"role": "user", "content": "Weather in Paris and Lyon?"},
             {"type": "function_call", "call_id": "call_Paris0001", "name": "get_weather",
              "arguments": '{"city": "Paris"}'},
             {"type": "function_call", "call_id": "fc_lyon_2", "name": "get_weather", "arguments": '{"city": "Lyon"}'},
             {"type": "function_call_output", "call_id": "call_Paris0001", "output": "sunny"},
             {"type": "function_call_output", "call_id": "fc_lyon_2", "output": "rainy"}]
    tool = {"type": "function", **WEATHER["function"]}
    reply = client.responses.create(model="m", instructions="Be brief.", input=items, tools=[tool],
                                    max_output_tokens=16, store=False)
    assert reply.status in ("completed", "incomplete")


def test_mistral_ids_the_model_writes_come_back_from_an_anthropic_client(servers):
    """The model's own call id (nine alphanumerics) reaches an Anthropic client as toolu_…; sent
    back, it is the model's id again in the prompt, which Mistral's template accepts."""
    srv = servers.get("Mistral-Small-3.2-24B-Instruct-2506")
    client = anthropic_sdk(srv)
    short_city = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}
    tool = {"name": "get_weather", "description": "Weather for a city", "input_schema": short_city}
    ask = {"role": "user", "content": "Weather in Paris?"}
    first = client.messages.create(model="m", max_tokens=400, tools=[tool], messages=[ask],
                                   tool_choice={"type": "tool", "name": "get_weather"})
    (use,) = [b for b in first.content if b.type == "tool_use"]
    assert use.id.startswith("toolu_") and len(use.id) == len("toolu_") + 9
    second = client.messages.create(model="m", max_tokens=2, tools=[tool], messages=[
        ask, {"role": "assistant", "content": first.content},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}])
    assert second.stop_reason in ("max_tokens", "end_turn", "tool_use")


def test_models_meta_shows_the_probe_findings(servers):
    mistral = get(servers.get("Mistral-Small-3.2-24B-Instruct-2506").port, "/v1/models/m").json()
    caps = mistral["meta"]["chat_template_caps"]
    assert caps["call_ids"] == "alnum9" and caps["tool_calls"] and caps["end_of_turn"] == "</s>"
    gemma = get(servers.get("google-gemma-2-2b-it").port, "/v1/models/m").json()["meta"]["chat_template_caps"]
    assert not gemma["system_role"] and not gemma["tools"]


def test_apply_template_shows_the_polyfilled_history(servers):
    srv = servers.get("meta-llama-Llama-3.1-8B-Instruct")
    history = request(srv.port, post_json("/apply-template", {"messages": chat_tool_loop(True), "tools": [WEATHER],
                                                               "add_generation_prompt": False})).json()["prompt"]
    # one call per turn, each followed by its result; no assistant opening after the last result
    assert history.index('"Paris"') < history.index("sunny") < history.index('"Lyon"') < history.index("rainy")
    assert not history.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
