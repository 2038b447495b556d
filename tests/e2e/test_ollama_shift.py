"""Ollama's `shift` and `truncate` on a 256-token context, read on the wire: an answer that reaches
the context's end drops older tokens and goes on (its grammar held across the shift), or with
`shift: false` stops there with done_reason "length"; a prompt longer than the context is cut
to its first num_keep tokens and its newest, leaving half the context for the answer, or with
`truncate: false` / `shift: false` is a 400 naming the context."""

from __future__ import annotations

import json

import pytest

from conftest import ServerProcess
from rawhttp import post_json, request
from tinymodel import NO_EOG

N_CTX = 256            # llama.cpp rounds a context up to a multiple of 256
MODEL = "tiny-chatml"          # single-model mode: the file's stem


@pytest.fixture(scope="module")
def server(tiny_model):
    srv = ServerProcess(tiny_model, "--ctx-size", str(N_CTX), "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def post(server, path: str, body: dict):
    return request(server.port, post_json(path, body), timeout=120)


def generate(server, **fields):
    body = {"model": MODEL, "stream": False, "raw": True, "prompt": "Once upon a time", **fields}
    return post(server, "/api/generate", body)


def forced(text: str) -> str:
    return "root ::= " + json.dumps(text)


def test_an_answer_goes_past_the_context_end_with_shift_and_stops_there_without(server):
    options = {"num_predict": 3 * N_CTX, "temperature": 0, "logit_bias": NO_EOG}
    shifted = generate(server, options=options)
    assert shifted.status == 200, shifted.body
    shifted = shifted.json()
    assert shifted["done_reason"] == "length" and shifted["eval_count"] == 3 * N_CTX      # num_predict ended it
    stopped = generate(server, options=options, shift=False).json()
    assert stopped["done_reason"] == "length"
    assert stopped["prompt_eval_count"] + stopped["eval_count"] <= N_CTX                  # the context ended it
    assert shifted["response"].startswith(stopped["response"])       # the same greedy answer up to the end


def test_a_grammar_holds_across_the_shifts(server):
    text = "abc, " * 250            # several times the context
    answer = generate(server, options={"grammar": forced(text), "temperature": 0}).json()
    assert answer["done_reason"] == "stop" and answer["response"] == text and answer["eval_count"] > N_CTX
    cut_short = generate(server, options={"grammar": forced(text), "temperature": 0}, shift=False).json()
    assert cut_short["done_reason"] == "length" and text.startswith(cut_short["response"])
    streamed = post(server, "/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                          "options": {"grammar": forced(text), "temperature": 0}})
    lines = [json.loads(line) for line in streamed.body.splitlines() if line.strip()]
    assert "".join(line["message"]["content"] for line in lines) == text and lines[-1]["done_reason"] == "stop"


@pytest.mark.parametrize("num_keep", [None, 0, 10])
def test_a_prompt_longer_than_the_context_is_cut_in_the_middle(server, num_keep):
    """Ollama's runner: the first num_keep tokens (after the BOS) and the newest, leaving about half the
    context for the answer (n_ctx - (n_ctx - keep) // 2 prompt tokens)."""
    options = {"num_predict": 4, "logit_bias": NO_EOG}
    if num_keep is not None:
        options["num_keep"] = num_keep
    answer = generate(server, prompt="one two three " * 400, options=options)
    assert answer.status == 200, answer.body
    keep = (4 if num_keep is None else num_keep) + 1          # the tiny model adds a BOS
    assert answer.json()["prompt_eval_count"] == N_CTX - (N_CTX - keep) // 2
    assert answer.json()["eval_count"] == 4


def test_a_chat_whose_last_message_alone_is_too_long_is_cut_too(server):
    body = {"model": MODEL, "stream": False, "options": {"num_predict": 3, "logit_bias": NO_EOG},
            "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello " * 50},
                         {"role": "assistant", "content": "hi"}, {"role": "user", "content": "word " * 800}]}
    answer = post(server, "/api/chat", body)
    assert answer.status == 200, answer.body
    assert answer.json()["prompt_eval_count"] <= N_CTX - (N_CTX - 5) // 2 and answer.json()["eval_count"] == 3


@pytest.mark.parametrize("refusal", [{"truncate": False}, {"shift": False}])
def test_without_truncate_or_shift_a_prompt_too_long_is_a_400(server, refusal):
    too_long = generate(server, prompt="one two three " * 400, **refusal)
    assert too_long.status == 400 and "context" in too_long.json()["error"]
    chat = post(server, "/api/chat", {"model": MODEL, "messages": [{"role": "user", "content": "word " * 800}],
                                      **refusal})
    assert chat.status == 400 and "context" in chat.json()["error"]


def test_bad_shift_fields_are_named(server):
    for body, words in (({"shift": "yes"}, "shift"), ({"truncate": 1}, "truncate"),
                        ({"options": {"num_keep": -2}}, "num_keep")):
        resp = generate(server, **body)
        assert resp.status == 400 and words in resp.json()["error"], resp.body


def test_without_num_predict_a_shifting_answer_ends_at_ten_contexts(server):
    """A model that never ends, no num_predict (Ollama's -1): Ollama's server caps the answer at ten
    contexts (llm/server.go) rather than shift forever; here too, the slot then serves the next."""
    answer = generate(server, options={"temperature": 0, "logit_bias": NO_EOG})
    assert answer.status == 200, answer.body
    assert answer.json()["done_reason"] == "length" and answer.json()["eval_count"] == 10 * N_CTX
    assert generate(server, options={"num_predict": -1, "temperature": 0, "logit_bias": NO_EOG,
                                     "num_ctx": N_CTX}).json()["eval_count"] == 10 * N_CTX
    assert generate(server, options={"num_predict": 2}).json()["eval_count"] == 2
