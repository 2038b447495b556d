"""Ollama's /api/generate with `suffix` (fill-in-the-middle, as Continue's Ollama provider asks)
and `insert` among /api/show's capabilities, through the official `ollama` client on tiny models
with and without FIM tokens: the real engine, forced middles through the real sampler."""

from __future__ import annotations

import json

import ollama
import pytest

from clients import ollama_client
from conftest import ServerProcess
from rawhttp import RawConnection, post_json, request
from tinymodel import CHATML_TEMPLATE, FIM_TOKENS, token_ids, write_tiny_gguf

PRE, SUF, MID = (FIM_TOKENS[role] for role in ("pre", "suf", "mid"))
FIM_IDS = token_ids(list(FIM_TOKENS.values()))


@pytest.fixture(scope="module")
def fim_server(tmp_path_factory):
    models = tmp_path_factory.mktemp("ollama-fim-models")
    write_tiny_gguf(models / "coder.gguf", chat_template=CHATML_TEMPLATE, fim="repo")
    write_tiny_gguf(models / "plain.gguf", chat_template=CHATML_TEMPLATE)
    srv = ServerProcess(None, "--models-dir", str(models), "--slots", "1", "--no-store")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(fim_server):
    return ollama_client(fim_server)


def forced(text: str) -> dict:
    return {"grammar": "root ::= " + json.dumps(text), "num_predict": 16}


def test_a_suffix_fills_the_middle(client):
    reply = client.generate(model="coder", prompt="def add(a, b):\n    return ", suffix="\n",
                            options=forced("a + b"), stream=False)
    assert reply.response == "a + b" and reply.done and reply.done_reason == "stop"


def test_a_suffix_streamed(client):
    pieces = list(client.generate(model="coder:latest", prompt="x = [", suffix="]\n", options=forced("1, 2"),
                                  stream=True))
    assert "".join(p.response for p in pieces) == "1, 2"
    assert pieces[-1].done and not any(p.done for p in pieces[:-1])


def test_the_prompt_is_the_fim_layout(fim_server, client):
    """The tokens /infill builds for the same prefix and suffix, not the chat template's turn."""
    reply = client.generate(model="coder", prompt="abc", suffix="xyz", options={"num_predict": 1}, stream=False)
    infill = request(fim_server.port, post_json("/infill", {"model": "coder", "input_prefix": "abc",
                                                            "input_suffix": "xyz", "n_predict": 0})).json()
    assert reply.prompt_eval_count == infill["tokens_evaluated"]
    chat_turn = client.generate(model="coder", prompt="abc", options={"num_predict": 1}, stream=False)
    assert chat_turn.prompt_eval_count != reply.prompt_eval_count


def test_a_suffix_on_a_model_without_fim_tokens_is_a_400_in_ollamas_shape(fim_server, client):
    resp = request(fim_server.port, post_json("/api/generate", {"model": "plain", "prompt": "a", "suffix": "b",
                                                                "stream": False}))
    assert resp.status == 400
    error = resp.json()
    assert list(error) == ["error"] and "'plain'" in error["error"] and "fill in the middle" in error["error"]
    with pytest.raises(ollama.ResponseError) as caught:       # streamed too: the 400 comes before any line
        list(client.generate(model="plain", prompt="a", suffix="b", stream=True))
    assert caught.value.status_code == 400 and "'plain'" in caught.value.error


@pytest.mark.parametrize("role", ["pre", "mid"])
@pytest.mark.parametrize("stream", [False, True])
def test_a_raw_fim_prompt_ends_at_the_next_fim_token(client, role, stream):
    """Twinny's own FIM prompt, raw: as with a suffix, the middle ends where the model starts
    another FIM section (forced: the text, the FIM token itself, then more text)."""
    grammar = f'root ::= "a + b" <[{FIM_IDS[FIM_TOKENS[role]]}]> "\\nprint(1)"'
    reply = client.generate(model="coder", prompt=f"{PRE}def add(a, b):\n    return {SUF}\n{MID}", raw=True,
                            options={"grammar": grammar, "num_predict": 32}, stream=stream)
    pieces = list(reply) if stream else [reply]
    assert "".join(p.response for p in pieces) == "a + b"
    assert pieces[-1].done and pieces[-1].done_reason == "stop"


# the hole as Ollama's clients send it: Continue's prompt and suffix, or Twinny's own FIM prompt sent raw
FILL_BODIES = {
    "ollama": {"prompt": "a", "suffix": "b"},
    "ollama-raw-fim": {"prompt": f"{PRE}a{SUF}b{MID}", "raw": True},
}


@pytest.mark.parametrize("route", sorted(FILL_BODIES))
def test_a_newer_fill_from_the_same_client_cancels_the_older(fim_server, route):
    """One slot: the older fill (a long forced middle, streamed) is cancelled by the newer one
    with the same X-Client-Id, which gets the slot instead of waiting behind it; the older one's
    last line says it was cancelled."""
    fill = FILL_BODIES[route]
    older = RawConnection(fim_server.port, timeout=60)
    try:
        older.send(post_json("/api/generate", {"model": "coder", **fill,
                                               "options": {**forced("y" * 1500), "num_predict": 1500}},
                             "X-Client-Id: editor-test-1\r\n"))
        seen = b""
        while b'"response"' not in seen:
            seen += older.sock.recv(4096)       # the older one is generating
        newer = request(fim_server.port, post_json("/api/generate", {
            "model": "coder", **fill, "stream": False, "options": forced("ok")},
            "X-Client-Id: editor-test-1\r\n"), timeout=60)
        assert newer.json()["response"] == "ok"
        while b'"done":true' not in seen:
            data = older.sock.recv(65536)
            assert data, "the older stream ended without its last line"
            seen += data
        line = [line for line in seen.split(b"\n") if b'"done":true' in line][0]
        last = json.loads(line[line.index(b"{"):])         # the chunk's size may come before it
        assert last["eval_count"] < 1500 and last["done_reason"] == "cancelled"
    finally:
        older.close()
    assert fim_server.wait_log("superseded by a newer completion from the same client")


def test_a_raw_prompt_without_fim_tokens_is_no_editor_completion(fim_server):
    """A plain raw continuation from the same client waits its turn: it cancels nothing."""
    older = RawConnection(fim_server.port, timeout=60)
    try:
        older.send(post_json("/api/generate", {"model": "coder", "prompt": "a", "raw": True, "stream": False,
                                               "options": forced("z" * 12)}, "X-Client-Id: raw-test-1\r\n"))
        newer = request(fim_server.port, post_json("/api/generate", {
            "model": "coder", "prompt": "a", "raw": True, "stream": False, "options": forced("ok")},
            "X-Client-Id: raw-test-1\r\n"), timeout=60)
        assert newer.json()["response"] == "ok"
        assert older.read_response().json()["response"] == "z" * 12
    finally:
        older.close()


def test_show_says_insert_for_a_model_with_fim_tokens(client):
    assert "insert" in client.show("coder").capabilities
    assert "insert" not in client.show("plain:latest").capabilities
    assert "completion" in client.show("plain").capabilities
