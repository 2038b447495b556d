"""Anthropic Messages in process, no server and no engine: the input conversion, thinking budgets, the signing key,
and the failures the tiny models cannot provoke (an exchange on a socket pair around a fake app)."""

from __future__ import annotations

import json
import socket
import threading

from localserve.conversation import Message, Reasoning, Text, ToolCall, ToolDefinition, ToolResult, text_message
from localserve.dialects.anthropic import replies
from localserve.dialects.anthropic import routes as anthropic_routes
from localserve.dialects.anthropic.input import read_chat, read_input
from localserve.dialects.exchange import Exchange
from localserve.dialects.pump import stream_job
from localserve.dialects.services import Services
from localserve.dialects.signing import load_signing_key, sign
from localserve.dialects.anthropic.errors import ANTHROPIC_ERRORS
from localserve.generation import (ActiveGeneration, Chunk, Context, Finished, GenerationFailure,
                                   GenerationRequest)
from localserve.dialects.anthropic.effort import DEFAULT_EFFORT, EFFORT_BUDGETS
from localserve.ops.metrics import ServerMetrics
from localserve.prompt.messages import template_messages
from localserve.settings import Settings
from localserve.wire.response_writer import ResponseWriter
from localserve.wire.http import Request
from localserve.wire.routes import Router

TIME = {"name": "get_time", "description": "The time in a zone", "input_schema": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"]}}


def test_signing_key_persists_in_the_data_dir(tmp_path):
    key = load_signing_key(tmp_path)
    assert len(key) == 32 and load_signing_key(tmp_path) == key
    assert (tmp_path / "signing.key").stat().st_mode & 0o077 == 0
    assert load_signing_key(None) != load_signing_key(None)
    assert sign(key, "text") != sign(load_signing_key(None), "text")


# ---- input conversion (no server) ------------------------------------------------------

def test_input_becomes_the_typed_conversation():
    key = b"k" * 32
    body = {
        "system": [{"type": "text", "text": "Be kind."}, {"type": "text", "text": "Be brief."}],
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "user", "content": [{"type": "text", "text": "second", "cache_control": {"type": "ephemeral"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": sign(key, "hmm")},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_time", "input": {"zone": "UTC"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "12:00"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "is_error": True,
                 "content": [{"type": "text", "text": "no such zone"}]},
                {"type": "text", "text": "and?"}]},
        ],
        "tools": [TIME], "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "thinking": {"type": "enabled", "budget_tokens": 64},
    }
    chat = read_chat(body, key)
    assert chat.messages == [
        text_message("system", "Be kind.\nBe brief."),
        text_message("user", "first\nsecond"),
        Message("assistant", (Text("Checking."), Reasoning("hmm"), ToolCall("toolu_1", "get_time", {"zone": "UTC"}))),
        Message("tool", (ToolResult("toolu_1", "12:00"),)),
        Message("tool", (ToolResult("toolu_2", "no such zone", is_error=True),)),
        text_message("user", "and?"),
    ]
    # as a template reads it: the OpenAI shape, arguments both the data and compact JSON text
    shown = template_messages(chat.messages)
    assert shown == [
        {"role": "system", "content": "Be kind.\nBe brief."},
        {"role": "user", "content": "first\nsecond"},
        {"role": "assistant", "content": "Checking.", "reasoning_content": "hmm", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "get_time", "arguments": {"zone": "UTC"}}}]},
        {"role": "tool", "tool_call_id": "toolu_1", "content": "12:00"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: no such zone"},
        {"role": "user", "content": "and?"},
    ]
    assert str(shown[2]["tool_calls"][0]["function"]["arguments"]) == '{"zone":"UTC"}'
    assert chat.tools == [ToolDefinition("get_time", "The time in a zone", TIME["input_schema"])]
    assert (chat.tool_choice.mode, chat.parallel_tool_calls) == ("required", False)
    assert chat.reasoning_budget == 64 and chat.template_kwargs == {"enable_thinking": True}
    named = read_chat({**body, "tool_choice": {"type": "tool", "name": "get_time"}}, key)
    assert (named.tool_choice.mode, named.tool_choice.name) == ("named", "get_time")


def test_adaptive_thinking_and_effort_set_the_budget():
    def budget(**fields):
        return read_input({"messages": [{"role": "user", "content": "x"}], **fields}, b"k" * 32).chat.reasoning_budget
    assert budget(thinking={"type": "adaptive"}) == EFFORT_BUDGETS[DEFAULT_EFFORT]
    for effort, tokens in EFFORT_BUDGETS.items():
        assert budget(thinking={"type": "adaptive"}, output_config={"effort": effort}) == tokens
    assert budget(thinking={"type": "enabled", "budget_tokens": 31999}, output_config={"effort": "low"}) == 31999
    assert budget(output_config={"effort": "low"}) == EFFORT_BUDGETS["low"]
    assert budget(thinking={"type": "adaptive"}, output_config={"effort": "someday-new"}) == \
        EFFORT_BUDGETS[DEFAULT_EFFORT]
    assert budget(thinking={"type": "disabled"}, output_config={"effort": "high"}) is None
    system_effort = [{"role": "user", "content": "x"}, {"role": "system", "output_config": {"effort": "low"}}]
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    turn = read_input({"messages": system_effort, "thinking": {"type": "adaptive"},
                       "output_config": {"effort": "max", "format": {"type": "json_schema", "schema": schema}}},
                      b"k" * 32).chat
    assert turn.reasoning_budget == EFFORT_BUDGETS["low"] and turn.template_kwargs["reasoning_effort"] == "low"
    assert turn.response_schema == schema


# ---- failures the tiny models cannot provoke, driven in process -------------------------

class _Gate:
    def check_access(self, exchange) -> None:
        pass

    def preflight_headers(self, exchange, *args) -> list:
        return []


class _BrokenServices(Services):
    def ready(self):
        raise RuntimeError("boom")


def _exchange() -> tuple[Exchange, socket.socket]:
    ours, theirs = socket.socketpair()
    req = Request("POST", "/v1/messages", "/v1/messages", {}, "HTTP/1.1", [("host", "x")], b"{}")
    return Exchange(req, ResponseWriter(ours, req), {}, ANTHROPIC_ERRORS, "req_test"), theirs


def _read_all(sock: socket.socket) -> bytes:
    sock.settimeout(2)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return data
        if not chunk:
            return data
        data += chunk


def test_internal_failure_is_500_api_error():
    exchange, theirs = _exchange()
    router = Router(_Gate())
    anthropic_routes.add_routes(router, _BrokenServices(Settings(), ServerMetrics(), threading.Event(), 0))
    router.dispatch(exchange.request, exchange.writer, "req_test")
    exchange.writer.sock.close()
    data = _read_all(theirs)
    assert data.startswith(b"HTTP/1.1 500")
    assert json.loads(data.split(b"\r\n\r\n", 1)[1]) == {
        "type": "error", "error": {"type": "api_error", "message": "internal server error"}}


def test_failure_mid_stream_is_an_error_event():
    exchange, theirs = _exchange()
    gen = ActiveGeneration(GenerationRequest(prompt_tokens=[1, 2, 3]))
    for ev in (Context(0, 64), Chunk(False, "Hi"),
               Finished(error=GenerationFailure("the engine failed to decode (status -1)"))):
        gen.events.put(ev)
    stream_job(exchange, replies.message_stream(replies.MessageMeta("msg_1", "m", b"k"), gen), gen, 0.0)
    exchange.writer.sock.close()
    text = _read_all(theirs).decode()
    assert "event: message_start" in text and "event: content_block_delta" in text
    assert "event: message_stop" not in text
    error = text.split("event: error\ndata: ", 1)[1].split("\n", 1)[0]
    assert json.loads(error) == {
        "type": "error", "error": {"type": "api_error", "message": "the engine failed to decode (status -1)"}}


# ---- the prompt: context edits counted once -------------------------------------------

class _CountingEngine:
    """Tokens as the text's characters; it notes each text it tokenizes."""
    n_ctx = 1 << 20

    def __init__(self):
        self.texts: list[str] = []

    def tokenize(self, text, *, add_special=True, parse_special=True, limit=None):
        self.texts.append(text)
        return list(range(len(text)))


def test_count_tokens_with_edits_renders_and_tokenizes_each_message_list_once():
    from localserve.dialects.anthropic.prompt import read_prompt
    from localserve.prompt.build import ChatModel
    from localserve.prompt.templates import ChatTemplate

    template = ChatTemplate("plain", "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                                     "<|assistant|>", "", "")
    engine = _CountingEngine()
    calls = []
    for i in range(4):
        calls += [{"role": "assistant", "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "get_time",
                                                     "input": {"zone": "UTC"}}]},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}",
                                                "content": "a long result " * 20}]}]
    body = {"messages": [{"role": "user", "content": "time?"}, *calls], "tools": [TIME],
            "context_management": {"edits": [{"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": 1},
                                              "trigger": {"type": "input_tokens", "value": 10}}]}}
    renders = []
    render = template.render
    template.render = lambda *args, **kwargs: renders.append(render(*args, **kwargs)) or renders[-1]
    prompt = read_prompt(ChatModel(engine, template), b"k" * 32, body, breakpoints=False)
    assert prompt.edits.applied and prompt.text == renders[-1]
    # the prompt before the edits and after: each rendered and tokenized once, the count's tokens kept
    assert len(renders) == len(set(renders)) == 2, "a prompt was rendered twice"
    assert engine.texts == renders
    assert prompt.tokens is not None and len(prompt.tokens) == len(prompt.text) < prompt.edits.original_tokens
