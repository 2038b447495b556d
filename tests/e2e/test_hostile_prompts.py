"""A conversation that cannot fit the context is refused before it is rendered (prompt/room.py),
in every API that runs or shows a prompt, with the context error each gives.

The context holds 256 tokens; a conversation of 400 empty-ish turns cannot fit whatever its
text. The refusal says "at least 400 prompt tokens": the count of its turns, made before the
template ran (a render would have counted thousands of tokens). A prompt that is only counted
(count_tokens) is still counted, and Ollama's truncate still keeps the newest turns that fit.
"""

from __future__ import annotations

import json

import pytest

from conftest import ServerProcess
from procstat import cpu_seconds
from rawhttp import post_json, request

N_CTX = 256
TURNS = 400
NEEDS = f"needs at least {TURNS} prompt tokens but the context holds {N_CTX}"


def conversation(turns: int = TURNS, text: str = "hi") -> list[dict]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": text} for i in range(turns)]


@pytest.fixture(scope="module")
def srv(tiny_model):
    server = ServerProcess(tiny_model, "--model-id", "tiny", "--ctx-size", str(N_CTX), "--no-store")
    yield server
    server.stop()


def post(srv, path: str, body: dict):
    return request(srv.port, post_json(path, body), timeout=60)


def test_chat_completions(srv):
    resp = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": conversation(), "max_tokens": 1})
    error = resp.json()["error"]
    assert resp.status == 400 and NEEDS in error["message"]
    assert (error["code"], error["type"], error["param"]) == ("context_length_exceeded", "invalid_request_error",
                                                              "messages")
    assert (error["n_prompt_tokens"], error["n_ctx"]) == (TURNS, N_CTX)


def test_responses(srv):
    resp = post(srv, "/v1/responses", {"model": "tiny", "input": conversation(), "max_output_tokens": 1})
    error = resp.json()["error"]
    assert resp.status == 400 and NEEDS in error["message"]
    assert (error["code"], error["param"]) == ("context_length_exceeded", "input")


def test_anthropic_messages(srv):
    resp = post(srv, "/v1/messages", {"model": "tiny", "messages": conversation(), "max_tokens": 1})
    body = resp.json()
    assert resp.status == 400 and body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error" and NEEDS in body["error"]["message"]


def test_ollama_chat_without_truncate(srv):
    resp = post(srv, "/api/chat", {"model": "tiny", "messages": conversation(), "stream": False, "truncate": False})
    assert resp.status == 400 and NEEDS in resp.json()["error"]


def test_ollama_chat_truncates_to_the_newest_turns_that_fit(srv):
    resp = post(srv, "/api/chat", {"model": "tiny", "messages": conversation(), "stream": False,
                                   "options": {"num_predict": 1}})
    assert resp.status == 200 and resp.json()["done"]
    assert 0 < resp.json()["prompt_eval_count"] < N_CTX


def test_apply_template(srv):
    resp = post(srv, "/apply-template", {"model": "tiny", "messages": conversation()})
    error = resp.json()["error"]
    assert resp.status == 400 and NEEDS in error["message"] and error["code"] == "context_length_exceeded"
    assert post(srv, "/apply-template", {"model": "tiny", "messages": conversation(4)}).status == 200


@pytest.mark.parametrize("path", ["/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"])
def test_input_tokens(srv, path):
    resp = post(srv, path, {"model": "tiny", "messages": conversation()})
    error = resp.json()["error"]
    assert resp.status == 400 and NEEDS in error["message"] and error["type"] == "exceed_context_size_error"


def test_count_tokens_still_counts_a_prompt_longer_than_the_context(srv):
    resp = post(srv, "/v1/messages/count_tokens", {"model": "tiny", "messages": conversation()})
    assert resp.status == 200 and resp.json()["input_tokens"] > TURNS


def test_a_message_longer_than_the_context_can_hold_is_refused_at_its_render(srv):
    text = "a" * (4 * 1024 * 1024)
    resp = post(srv, "/v1/chat/completions", {"model": "tiny", "messages": conversation(1, text), "max_tokens": 1})
    error = resp.json()["error"]
    assert resp.status == 400 and error["code"] == "context_length_exceeded" and error["n_prompt_tokens"] > N_CTX


def test_two_hundred_thousand_messages_cost_the_server_little_and_it_keeps_serving(srv):
    """200,000 messages (7.5 MB) took 2.4 s of the server's CPU to their 400 (the reading and the
    render); refused from their roles, before either, it is the JSON parse and little else."""
    body = post_json("/v1/chat/completions", json.dumps({"model": "tiny", "messages": conversation(200_000),
                                                         "max_tokens": 1}).encode())
    before = cpu_seconds(srv.proc.pid)
    resp = request(srv.port, body, timeout=60)
    spent = cpu_seconds(srv.proc.pid) - before
    assert resp.status == 400 and resp.json()["error"]["n_prompt_tokens"] == 200_000
    assert spent < 1.0, f"{spent:.2f} s of CPU"
    assert post(srv, "/v1/chat/completions", {"model": "tiny", "messages": conversation(1),
                                              "max_tokens": 1}).status == 200
