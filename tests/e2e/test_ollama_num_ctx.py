"""What Ollama's clients send as Ollama's docs write it (issue 45): `curl -d` (a form Content-Type)
read as JSON, a request's `num_ctx` honoured as Ollama honours it (the model loaded again with
that much context once its requests in flight are done, within its training context),
`truncate`, and Ollama's 404 for a name the catalogue has not, on a one-model server too.

The model was trained on 4096 tokens and is served with --ctx-size 256. The tests run in file
order: the context only grows.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading

import pytest

from clients import ollama_client, openai_sdk
from conftest import ServerProcess
from needs import check_skip, missing
from rawhttp import post_json, request
from tinymodel import CHATML_TEMPLATE, NO_EOG, write_tiny_gguf

TRAINED = 4096
SERVED = 256
LONG = "hello world " * 200         # some 400 tokens: more than 256
IN_FLIGHT_TOKENS = 240          # all but the context: the longest it can run


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("num-ctx")
    path = write_tiny_gguf(folder / "ctx.gguf", chat_template=CHATML_TEMPLATE, context_length=TRAINED)
    srv = ServerProcess(path, "--model-id", "ctx", "--ctx-size", str(SERVED), "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def post(server, path: str, body: dict):
    return request(server.port, post_json(path, body), timeout=60)


def served_context(server) -> int:
    running = request(server.port, b"GET /api/ps HTTP/1.1\r\nHost: localhost\r\n\r\n").json()["models"]
    assert [m["name"] for m in running] == ["ctx:latest"]
    return running[0]["context_length"]


def shown_num_ctx(server) -> int:
    parameters = post(server, "/api/show", {"model": "ctx"}).json()["parameters"]
    line = next(line for line in parameters.split("\n") if line.startswith("num_ctx "))
    return int(line.split()[1])


def curl(server, path: str, body: str) -> str:
    """curl as Ollama's API docs write it: `curl http://localhost:11434/api/chat -d '{...}'`."""
    return subprocess.run(["curl", "-sS", f"{server.base_url}{path}", "-d", body], capture_output=True, text=True,
                          timeout=60, check=True).stdout


# ---- curl -d, as Ollama's docs write it -----------------------------------------------------------

def test_curl_dash_d_as_ollamas_docs_write_it(server):
    check_skip("curl")
    if shutil.which("curl") is None:
        missing("curl", "the curl command is not installed")
    streamed = curl(server, "/api/chat", '{\n  "model": "ctx",\n  "messages": [\n    {\n      "role": "user",\n'
                                         '      "content": "why is the sky blue?"\n    }\n  ]\n}')
    lines = [json.loads(line) for line in streamed.strip().split("\n")]
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] in ("stop", "length"), lines[-1]
    whole = json.loads(curl(server, "/api/generate", '{\n  "model": "ctx",\n  "prompt": "Why is the sky blue?",\n'
                                                     '  "stream": false,\n  "options": {"num_predict": 3}\n}'))
    # Ollama's default sampling (temperature 0.8, a random seed) may draw the tiny model's end token first
    assert whole["done"] is True and (whole["eval_count"] == 3 and whole["done_reason"] == "length"
                                      or whole["eval_count"] < 3 and whole["done_reason"] == "stop"), whole
    shown = json.loads(curl(server, "/api/show", '{\n  "model": "ctx"\n}'))
    assert shown["details"]["family"] == "llama"


# ---- an unknown name: Ollama's 404, on a one-model server too ----------------------------------------

def test_an_unknown_name_is_ollamas_404_where_openai_routes_answer_any_name(server):
    for path, body in [("/api/chat", {"model": "llama3.2", "messages": [{"role": "user", "content": "hi"}]}),
                       ("/api/generate", {"model": "llama3.2", "prompt": "hi"}),
                       ("/api/show", {"model": "llama3.2"}), ("/api/embed", {"model": "llama3.2", "input": "x"})]:
        resp = post(server, path, body)
        assert resp.status == 404 and resp.json() == {"error": "model 'llama3.2' not found"}, (path, resp.body)
    assert post(server, "/api/chat", {"model": "ctx:latest", "messages": [], "stream": False}).status == 200
    reply = openai_sdk(server).chat.completions.create(model="gpt-4o", max_tokens=2,
                                                       messages=[{"role": "user", "content": "hi"}])
    assert reply.model == "ctx"


# ---- truncate -------------------------------------------------------------------------------------

def history(turns: int) -> list[dict]:
    messages = [{"role": "system", "content": "be brief"}]
    for i in range(turns):
        messages += [{"role": "user", "content": f"question {i}: " + "hello world " * 20},
                     {"role": "assistant", "content": "hello " * 10}]
    return messages + [{"role": "user", "content": "and now?"}]


def test_truncate_drops_the_oldest_turns_as_ollama_does(server):
    assert served_context(server) == SERVED
    body = {"model": "ctx", "messages": history(12), "stream": False, "options": {"num_predict": 2}}
    kept = post(server, "/api/chat", body)
    assert kept.status == 200, kept.body
    assert SERVED // 2 < kept.json()["prompt_eval_count"] <= SERVED - 2
    assert "messages dropped to fit the context (truncate)" in server.log
    refused = post(server, "/api/chat", {**body, "truncate": False})
    assert refused.status == 400 and "context" in refused.json()["error"]
    bad = post(server, "/api/chat", {**body, "shift": "yes"})
    assert bad.status == 400 and "shift" in bad.json()["error"]


# ---- num_ctx ------------------------------------------------------------------------------------

def test_a_prompt_longer_than_the_context_is_refused_without_num_ctx(server):
    resp = post(server, "/api/chat", {"model": "ctx", "messages": [{"role": "user", "content": LONG}],
                                      "shift": False})      # shift on, it would be cut to fit (test_ollama_shift.py)
    assert resp.status == 400 and str(SERVED) in resp.json()["error"]
    assert shown_num_ctx(server) == SERVED


def test_num_ctx_loads_the_model_again_once_the_request_in_flight_is_done(server):
    """A generation runs; a request asking for more context waits for it, then gets it."""
    started, parts = threading.Event(), []

    def generate() -> None:
        for part in ollama_client(server).generate(model="ctx", prompt="go", raw=True, stream=True, options={
                "num_predict": IN_FLIGHT_TOKENS, "temperature": 0, "logit_bias": NO_EOG}):
            parts.append(part)
            started.set()

    running = threading.Thread(target=generate)
    running.start()
    assert started.wait(30)
    asked = post(server, "/api/chat", {"model": "ctx", "messages": [{"role": "user", "content": LONG}],
                                       "stream": False, "options": {"num_ctx": 1024, "num_predict": 2}})
    running.join(timeout=60)
    assert parts[-1].done_reason == "length" and parts[-1].eval_count == IN_FLIGHT_TOKENS    # it never failed
    assert asked.status == 200, asked.body
    assert asked.json()["prompt_eval_count"] > SERVED
    assert served_context(server) == 1024 and shown_num_ctx(server) == 1024
    assert "loaded again with a context of 1024" in server.log
    # asking for less, or as much, changes nothing
    post(server, "/api/generate", {"model": "ctx", "prompt": "x", "options": {"num_ctx": 512, "num_predict": 1}})
    assert served_context(server) == 1024


def test_num_ctx_on_openai_shaped_requests(server):
    """Goose sends it beside the OpenAI fields, or in `options`."""
    chat = openai_sdk(server)
    messages = [{"role": "user", "content": LONG * 3}]
    chat.chat.completions.create(model="ctx", messages=messages, max_tokens=1, extra_body={"num_ctx": 2048})
    assert served_context(server) == 2048
    chat.chat.completions.create(model="ctx", messages=messages, max_tokens=1,
                                 extra_body={"options": {"num_ctx": 3072}})
    assert served_context(server) == 3072


def test_num_ctx_past_the_training_context_gets_the_training_context(server):
    reply = ollama_client(server).generate(model="ctx", prompt="x", options={"num_ctx": 100_000, "num_predict": 1})
    assert reply.done
    assert served_context(server) == TRAINED and shown_num_ctx(server) == TRAINED
    info = post(server, "/api/show", {"model": "ctx"}).json()["model_info"]
    assert info["llama.context_length"] == TRAINED


@pytest.mark.parametrize("body, param", [({"options": {"num_ctx": "big"}}, "options.num_ctx"),
                                         ({"options": {"num_ctx": 1.5}}, "options.num_ctx")])
def test_a_bad_num_ctx_is_a_400_naming_it(server, body, param):
    resp = post(server, "/api/chat", {"model": "ctx", "messages": [{"role": "user", "content": "x"}], **body})
    assert resp.status == 400 and param in resp.json()["error"]
    openai_shaped = post(server, "/v1/chat/completions", {"model": "ctx", "num_ctx": [1],
                                                          "messages": [{"role": "user", "content": "x"}]})
    assert openai_shaped.status == 400 and openai_shaped.json()["error"]["param"] == "num_ctx"
