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
import pytest

from clients import ollama_client, openai_sdk
from conftest import ServerProcess
from stores import hf_cache, llamacpp_flat, lmstudio, ollama_store
from tinyvision import write_tiny_mmproj

SYSTEM = "You answer in one word. " * 4
EXPECTED = {
    "tiny:latest": "ollama", "tiny:plain": "ollama", "alice/tiny:q8": "ollama",
    "org/Tiny-GGUF:Q4_K_M": "hf-cache", "org/Tiny-GGUF:Q8_0": "hf-cache",
    "lmstudio-community/Studio-GGUF:Q5_K_M": "lmstudio",
    "ggml-org/flat-GGUF:Q4_0": "llamacpp-cache",
}


def build_home(home, model: bytes, projector: bytes) -> None:
    store = home / ".ollama" / "models"
    ollama_store(store, ("registry.ollama.ai", "library", "tiny", "latest"), model, system=SYSTEM,
                 params={"num_predict": 3, "temperature": 0, "num_ctx": 512})
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
    build_home(home, tiny_model.read_bytes(), projector.read_bytes())
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
    assert server.log.count("gone-Q4_0.gguf is missing or unreadable; skipped") == 1


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
        assert ids[0] == "own" and set(ids[1:]) == {"tiny:latest", "tiny:plain", "alice/tiny:q8"}
        # --model alone still answers any other name
        reply = openai_sdk(limited).chat.completions.create(model="whatever", max_tokens=1,
                                                            messages=[{"role": "user", "content": "hi"}])
        assert reply.model == "own"
    finally:
        limited.stop()
