"""Models already on disk in other tools' stores, served under their own names (issue 50).

A temporary home holds Ollama's store, the Hugging Face cache, LM Studio's folder and
llama.cpp's flat cache, each with the tiny model; the server started there lists every model
with its source on /v1/models, /api/tags (the official ollama client) and the page's list,
and answers each. An Ollama model's stored system prompt and options are its defaults, under
the request's own. --no-discover and --discover limit it; a model whose file is gone is one
log line.
"""

from __future__ import annotations

import os

import httpx
import ollama
import pytest

from clients import anthropic_sdk, ollama_client, openai_sdk
from conftest import ROOT, ServerProcess
from stores import hf_cache, llamacpp_flat, lmstudio, ollama_store
from tinymodel import write_tiny_gguf
from tinyvision import write_tiny_mmproj

SYSTEM = "You answer in one word. " * 4
GO_TEMPLATE = "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}<|im_start|>user\n{{ .Prompt }}"
EXPECTED = {
    "tiny:latest": "ollama", "tiny:plain": "ollama", "alice/tiny:q8": "ollama", "bare:latest": "ollama",
    "org/Tiny-GGUF:Q4_K_M": "hf-cache", "org/Tiny-GGUF:Q8_0": "hf-cache",
    "lmstudio-community/Studio-GGUF:Q5_K_M": "lmstudio",
    "ggml-org/flat-GGUF:Q4_0": "llamacpp-cache",
}


def build_home(home, model: bytes, projector: bytes, bare: bytes) -> None:
    store = home / ".ollama" / "models"
    ollama_store(store, ("registry.ollama.ai", "library", "tiny", "latest"), model, system=SYSTEM,
                 params={"num_predict": 3, "temperature": 0, "num_ctx": 512}, template=GO_TEMPLATE)
    ollama_store(store, ("registry.ollama.ai", "library", "bare", "latest"), bare, template=GO_TEMPLATE)
    ollama_store(store, ("registry.ollama.ai", "library", "tiny", "plain"), model)
    ollama_store(store, ("registry.ollama.ai", "alice", "tiny", "q8"), model)
    cache = home / ".cache"
    hf_cache(cache / "huggingface" / "hub", "org/Tiny-GGUF", {"tiny-Q4_K_M.gguf": model, "tiny-Q8_0.gguf": model,
                                                              "mmproj-tiny-f16.gguf": projector})
    snapshot = hf_cache(cache / "huggingface" / "hub", "org/Gone-GGUF", {"gone-Q4_0.gguf": model + b"x"})
    blob = os.path.realpath(snapshot / "gone-Q4_0.gguf")
    os.unlink(blob)                 # the link stays, its blob is gone
    lmstudio(home / ".lmstudio" / "models", "lmstudio-community", "Studio-GGUF", {"Studio-Q5_K_M.gguf": model})
    llamacpp_flat(cache / "llama.cpp", "ggml-org", "flat-GGUF", "Q4_0", "flat-Q4_0.gguf", model)


@pytest.fixture(scope="module")
def home(tmp_path_factory, tiny_model):
    home = tmp_path_factory.mktemp("home")
    projector = write_tiny_mmproj(tmp_path_factory.mktemp("projector") / "mmproj.gguf")
    bare = write_tiny_gguf(tmp_path_factory.mktemp("bare") / "bare.gguf")       # no chat template of its own
    build_home(home, tiny_model.read_bytes(), projector.read_bytes(), bare.read_bytes())
    return home


def home_env(home) -> dict[str, str]:
    return {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "XDG_DATA_HOME": str(home / "data"),
            "LOCALSERVE_NO_DISCOVER": "0"}     # conftest turns discovery off for every other server


@pytest.fixture(scope="module")
def server(home):
    srv = ServerProcess(None, "--slots", "1", env=home_env(home))
    yield srv
    srv.stop()


def test_every_store_listed_with_its_source(server):
    models = {m["id"]: m for m in httpx.get(server.base_url + "/v1/models").json()["data"]}
    assert {name: m["source"] for name, m in models.items()} == EXPECTED
    assert models["org/Tiny-GGUF:Q4_K_M"]["architecture"]["input_modalities"] == ["text", "image"]
    assert models["org/Tiny-GGUF:Q4_K_M"]["origin"].endswith(os.path.join(".cache", "huggingface", "hub"))
    assert "hf.co/org/Tiny-GGUF:Q4_K_M" in models["org/Tiny-GGUF:Q4_K_M"]["aliases"]
    tags = ollama_client(server).list()
    assert {m.model for m in tags.models} == set(EXPECTED)
    assert {m["name"]: m["source"] for m in httpx.get(server.base_url + "/api/tags").json()["models"]} == EXPECTED
    assert server.log.count("gone-Q4_0.gguf' is missing or unreadable; skipped") == 1      # the path escaped, quoted


@pytest.mark.parametrize("name", ["tiny:plain", "alice/tiny:q8", "hf.co/org/Tiny-GGUF:Q8_0", "org/Tiny-GGUF",
                                  "lmstudio-community/Studio-GGUF/Studio-Q5_K_M.gguf", "ggml-org/flat-GGUF:Q4_0"])
def test_each_store_answers(server, name):
    reply = openai_sdk(server).chat.completions.create(model=name, max_tokens=2,
                                                        messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].finish_reason in ("length", "stop")


def test_ollama_stored_defaults(server):
    client = ollama_client(server)
    assert "num_predict                    3" in client.show("tiny").parameters
    assert httpx.post(server.base_url + "/api/show", json={"model": "tiny"}).json()["system"] == SYSTEM
    ask = [{"role": "user", "content": "hi"}]
    stored = client.chat("tiny", messages=ask)
    plain = client.chat("tiny:plain", messages=ask, options={"num_predict": 3})
    assert stored.eval_count == 3                    # the stored num_predict
    assert stored.prompt_eval_count > plain.prompt_eval_count + 10      # the stored system prompt
    own = client.chat("tiny", messages=[{"role": "system", "content": "x"}, *ask], options={"num_predict": 2})
    assert own.eval_count == 2 and own.prompt_eval_count < stored.prompt_eval_count     # the request's own win
    generated = httpx.post(server.base_url + "/api/generate", json={"model": "tiny", "prompt": "hi",
                                                                         "stream": False}).json()
    assert generated["eval_count"] == 3
    ps = client.ps()
    assert {m.model: m.context_length for m in ps.models}.get("tiny:latest") == 512       # num_ctx from params


def test_stored_defaults_on_every_dialect(server):
    """Ollama serves a stored model with its system prompt and options whatever asks: so do the
    OpenAI, Anthropic and llama-server routes, under the request's own fields."""
    ask = [{"role": "user", "content": "hi"}]
    openai = openai_sdk(server)
    stored = openai.chat.completions.create(model="tiny", messages=ask)
    plain = openai.chat.completions.create(model="tiny:plain", messages=ask, max_tokens=3, temperature=0)
    assert stored.usage.completion_tokens == 3                                  # num_predict
    assert stored.usage.prompt_tokens > plain.usage.prompt_tokens + 10          # the system prompt
    own = openai.chat.completions.create(model="tiny", messages=[{"role": "system", "content": "x"}, *ask],
                                         max_tokens=2)
    assert own.usage.completion_tokens == 2 and own.usage.prompt_tokens < stored.usage.prompt_tokens
    response = openai.responses.create(model="tiny", input="hi", store=False)
    assert response.usage.output_tokens == 3 and response.usage.input_tokens == stored.usage.prompt_tokens
    anthropic = anthropic_sdk(server)
    message = anthropic.messages.create(model="tiny", max_tokens=2, messages=ask)
    bare = anthropic.messages.create(model="tiny:plain", max_tokens=2, messages=ask)
    prompt = lambda usage: usage.input_tokens + usage.cache_read_input_tokens     # noqa: E731
    assert prompt(message.usage) > prompt(bare.usage) + 10
    completion = httpx.post(server.base_url + "/completion", json={"model": "tiny", "prompt": "hi"}).json()
    assert completion["generation_settings"]["n_predict"] == 3
    assert completion["generation_settings"]["temperature"] == 0


def test_delete_refused_naming_the_stores_own_tool(server, home):
    """Discovered models are read-only: Ollama's DELETE /api/delete answers in Ollama's shape,
    naming the tool that removes the model, and touches nothing."""
    stores = (home / ".ollama", home / ".cache" / "huggingface", home / ".lmstudio")
    listing = lambda: sorted((str(p), p.lstat().st_size) for s in stores for p in s.rglob("*"))   # noqa: E731
    before = listing()
    client = ollama_client(server)
    for name, words in (("tiny", "ollama rm tiny:latest"), ("hf.co/org/Tiny-GGUF:Q8_0", "hf cache delete"),
                        ("lmstudio-community/Studio-GGUF:Q5_K_M", "LM Studio")):
        with pytest.raises(ollama.ResponseError) as caught:
            client.delete(name)
        assert caught.value.status_code == 400 and words in caught.value.error
    assert listing() == before
    assert client.show("tiny").details is not None


def test_a_go_template_alone_is_refused_at_load(server):
    """Ollama's template layer is a Go template this server does not run: with the GGUF's own
    template (tiny) it is not needed; a GGUF without one (bare) is refused, saying what to do."""
    reply = httpx.post(server.base_url + "/v1/chat/completions",
                       json={"model": "bare", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]})
    assert reply.status_code == 500
    message = reply.json()["error"]["message"]
    assert "Go template" in message and "chat_template_file" in message
    ollama = httpx.post(server.base_url + "/api/chat", json={"model": "bare", "stream": False,
                                                             "messages": [{"role": "user", "content": "hi"}]})
    assert "Go template" in ollama.json()["error"]


def test_the_pages_source_column(server, chromium):
    """The page's Models table says where each model came from, in a real browser."""
    browser = chromium.lend(ROOT / "test-output" / "webui")
    try:
        browser.open(server.base_url + "/")
        browser.el("#tab-status").click()
        rows = lambda: {r[0]: r[-1] for r in browser.js(       # noqa: E731  (model: source)
            "return [...document.querySelectorAll('#models-table tbody tr')]"
            ".map(r => [...r.cells].map(c => c.textContent))")}
        browser.wait(lambda: len(rows()) == len(EXPECTED), "the Models table never listed the found models")
        assert rows() == EXPECTED
        assert browser.console_errors() == []
        browser.screenshot("discovered_sources")
    finally:
        browser.park()


def test_discovery_off_and_limited(home, tiny_model):
    env = home_env(home)
    off = ServerProcess(tiny_model, "--model-id", "own", "--no-discover", env=env)
    try:
        assert [m["id"] for m in httpx.get(off.base_url + "/v1/models").json()["data"]] == ["own"]
    finally:
        off.stop()
    limited = ServerProcess(tiny_model, "--model-id", "own", "--discover", "ollama", env=env)
    try:
        ids = [m["id"] for m in httpx.get(limited.base_url + "/v1/models").json()["data"]]
        assert ids[0] == "own" and set(ids[1:]) == {"tiny:latest", "tiny:plain", "alice/tiny:q8", "bare:latest"}
        # --model alone still answers any other name
        reply = openai_sdk(limited).chat.completions.create(model="whatever", max_tokens=1,
                                                            messages=[{"role": "user", "content": "hi"}])
        assert reply.model == "own"
    finally:
        limited.stop()
