"""OpenAI Completions with `suffix`: the same FIM prompt as /infill, through the official SDK."""

from __future__ import annotations

import json

import pytest

from clients import openai_sdk
from conftest import ServerProcess
from rawhttp import post_json, request
from tinymodel import CHATML_TEMPLATE, FIM_TOKENS, token_ids, write_tiny_gguf

PRE, SUF, MID = FIM_TOKENS["pre"], FIM_TOKENS["suf"], FIM_TOKENS["mid"]
FIM_IDS = token_ids(list(FIM_TOKENS.values()))


@pytest.fixture(scope="module")
def fim_server(tmp_path_factory):
    models = tmp_path_factory.mktemp("fim-completion-models")
    write_tiny_gguf(models / "coder.gguf", chat_template=CHATML_TEMPLATE, fim="fim")
    write_tiny_gguf(models / "plain.gguf", chat_template=CHATML_TEMPLATE)
    srv = ServerProcess(None, "--models-dir", str(models), "--slots", "1", "--no-store")
    yield srv
    srv.stop()


@pytest.fixture
def client(fim_server):
    return openai_sdk(fim_server)


@pytest.fixture
def stream_client(fim_server):
    # Not strict: the SDK's Completion type forbids the null finish_reason that the API itself
    # sends on all but the last streamed chunk.
    return openai_sdk(fim_server, strict=False)


def forced(text: str) -> dict:
    return {"grammar": "root ::= " + json.dumps(text)}


def test_a_suffix_fills_the_middle(client):
    reply = client.completions.create(model="coder", prompt="def add(a, b):\n    return ", suffix="\n",
                                      max_tokens=16, extra_body=forced("a + b"))
    choice = reply.choices[0]
    assert choice.text == "a + b" and choice.finish_reason == "stop"


def test_the_prompt_is_the_fim_layout(fim_server, client):
    """The same tokens /infill builds for the same prefix and suffix: the cache sees them alike."""
    reply = client.completions.create(model="coder", prompt="abc", suffix="xyz", max_tokens=1)
    answer = request(fim_server.port, post_json("/infill", {"model": "coder", "input_prefix": "abc",
                                                            "input_suffix": "xyz", "n_predict": 0})).json()
    assert answer["prompt"] == f"<s>{PRE}abc{SUF}xyz{MID}"
    assert reply.usage.prompt_tokens == answer["tokens_evaluated"]


def test_a_suffix_streamed(stream_client):
    stream = stream_client.completions.create(model="coder", prompt="x = [", suffix="]\n", max_tokens=16, stream=True,
                                       extra_body=forced("1, 2, 3"))
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "1, 2, 3"


def test_echo_returns_the_prompt_before_the_middle(client, stream_client):
    reply = client.completions.create(model="coder", prompt="def f():\n    ", suffix="\n", echo=True, max_tokens=8,
                                      extra_body=forced("pass"))
    assert reply.choices[0].text == "def f():\n    pass"
    stream = stream_client.completions.create(model="coder", prompt="def f():\n    ", suffix="\n", echo=True,
                                       max_tokens=8, stream=True, extra_body=forced("pass"))
    assert "".join(c.choices[0].text for c in stream if c.choices) == "def f():\n    pass"


def test_echo_without_a_suffix(client):
    reply = client.completions.create(model="plain", prompt="Say:", echo=True, max_tokens=8,
                                      extra_body=forced(" hi"))
    assert reply.choices[0].text == "Say: hi"


def test_a_suffix_on_a_model_without_fim_tokens_is_a_400(fim_server):
    resp = request(fim_server.port, post_json("/v1/completions", {"model": "plain", "prompt": "a", "suffix": "b"}))
    assert resp.status == 400
    error = resp.json()["error"]
    assert "'plain'" in error["message"] and error["param"] == "suffix" and error["code"] == "model_not_supported"


def test_a_suffix_needs_a_text_prompt(fim_server):
    resp = request(fim_server.port, post_json("/v1/completions", {"model": "coder", "prompt": [1, 2], "suffix": "b"}))
    assert resp.status == 400 and resp.json()["error"]["param"] == "prompt"


def then_a_fim_token(text: str, role: str) -> dict:
    """The text, the model's own FIM token (the token itself, not its characters), then more."""
    return {"grammar": f"root ::= {json.dumps(text)} <[{FIM_IDS[FIM_TOKENS[role]]}]> {json.dumps(chr(10) + 'print(f())')}"}


# Continue's OpenAI provider renders its own FIM template into a plain prompt
OWN_FIM_PROMPT = f"{PRE}def f():\n    {SUF}\n{MID}"


@pytest.mark.parametrize("role", ["pre", "suf", "mid"])
def test_a_fim_prompt_of_the_clients_own_ends_at_the_next_fim_token(client, role):
    """As with a suffix: the middle ends where the model starts another FIM section."""
    reply = client.completions.create(model="coder", prompt=OWN_FIM_PROMPT, max_tokens=32,
                                      extra_body=then_a_fim_token("return 1", role))
    choice = reply.choices[0]
    assert choice.text == "return 1" and choice.finish_reason == "stop"


def test_a_fim_prompt_of_the_clients_own_streamed_ends_at_the_next_fim_token(stream_client):
    chunks = list(stream_client.completions.create(model="coder", prompt=OWN_FIM_PROMPT, max_tokens=32, stream=True,
                                                   extra_body=then_a_fim_token("return 1", "suf")))
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "return 1"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"


def test_a_prompt_without_the_middle_token_runs_on_past_a_fim_token(client):
    """Not a FIM prompt: a plain continuation, which FIM tokens do not end."""
    reply = client.completions.create(model="coder", prompt="def f():", max_tokens=32,
                                      extra_body=then_a_fim_token("return 1", "suf"))
    assert reply.choices[0].text == f"return 1{SUF}\nprint(f())"
