"""End to end on Gemma 3 270M, the benches' model (bench/gemma.py): a real base model whose
sliding-window layers and Q4_K weights (llama.cpp's AMX kernels crash on them) are what these
tests need. The demo model's own tests are tests/e2e/test_demo_model.py."""

from __future__ import annotations

import pytest

from clients import openai_sdk
from conftest import ServerProcess
from needs import gemma_model


@pytest.fixture(scope="module")
def gemma():
    return gemma_model()


@pytest.fixture(scope="module")
def gemma_server(gemma):
    srv = ServerProcess(gemma, "--ctx-size", "2048", "--slots", "2", "--no-store")
    yield srv
    srv.stop()


@pytest.fixture
def client(gemma_server):
    return openai_sdk(gemma_server, api_key="x")


def test_a_gguf_without_a_template_gets_the_builtin_gemma_one(gemma_server, client):
    assert "gemma" in client.models.list().data[0].id
    assert "chat template builtin:gemma" in gemma_server.log


def test_real_text_and_prompt_cache(client):
    prompt = "The capital of France is the city of"
    first = client.completions.create(model="x", prompt=prompt, max_tokens=8, temperature=0)
    assert "Paris" in first.choices[0].text
    second = client.completions.create(model="x", prompt=prompt, max_tokens=8, temperature=0)
    assert second.choices[0].text == first.choices[0].text
    assert second.usage.prompt_tokens_details.cached_tokens > 0


def test_chat_through_the_builtin_gemma_template(client):
    reply = client.chat.completions.create(model="x", max_tokens=24, temperature=0, messages=[
        {"role": "user", "content": "Name three colours of the rainbow."}])
    text = reply.choices[0].message.content
    assert reply.choices[0].finish_reason in ("stop", "length")
    words = [w for w in text.replace(",", " ").split() if w.isalpha()]
    assert len(words) >= 3                      # words, not byte noise
    assert "<end_of_turn>" not in text and "<start_of_turn>" not in text


def test_weights_kept_out_of_amx_unless_asked(gemma_server):
    """Gemma 3 270M's Q4_K weights crash llama.cpp's AMX kernels (llama.cpp #20824): the
    default layout never uses AMX, and still repacks the weights CPU_REPACK takes."""
    from rawhttp import request
    from localserve.engine.cpu_weights import extra_buffer_types
    meta = request(gemma_server.port, b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n").json()["data"][0]["meta"]
    assert meta["cpu_weights"] == "auto"
    assert "AMX" not in meta["weight_buffers_mib"] and meta["weight_buffers_mib"]
    offered = extra_buffer_types()
    if "AMX" in offered and "CPU_REPACK" in offered:
        assert meta["weight_buffers_mib"]["CPU_REPACK"] > 0
    assert "warm-up decode" in gemma_server.log


def test_no_bos_warning_per_request(gemma_server, client):
    """The Gemma template writes <bos>; llama.cpp must not add a second one and warn."""
    client.chat.completions.create(model="x", max_tokens=2, temperature=0,
                                   messages=[{"role": "user", "content": "Hi"}])
    assert gemma_server.wait_log("POST /v1/chat/completions 200")
    assert "BOS" not in gemma_server.log


def test_gemma_drafts_for_itself(gemma):
    """A draft model's weights follow --cpu-weights too: on an AMX Xeon, llama.cpp's own layout for
    Gemma's Q4_K weights crashes in the multi-token decodes a draft catches up with."""
    srv = ServerProcess(gemma, "--ctx-size", "1024", "--slots", "1", "--no-store", "--speculative", "draft",
                        "--draft-model", gemma)
    try:
        prompt = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n"
        answer = openai_sdk(srv, api_key="x").completions.create(model="x", prompt=prompt, max_tokens=24,
                                                                 temperature=0)
        assert answer.choices[0].text.startswith("    return a + b")
        assert answer.model_extra["timings"]["draft_n_accepted"] > 0          # the draft model's, not a prediction's
        assert answer.usage.completion_tokens_details.accepted_prediction_tokens == 0
        assert srv.proc.poll() is None
    finally:
        srv.stop()


def test_a_sliding_window_model_computes_a_head_two_concurrent_requests_share_once(gemma_server):
    """Gemma 3's sliding-window layers cannot share KV cells: the second request waits while the first
    computes the shared head, whose prefill pauses at the head's end, and is copied it as data there."""
    from rawhttp import post_json, request, run_concurrently
    system = "You are a terse assistant who answers in one short sentence and never digresses. " * 40

    def ask(user):
        body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
                "max_tokens": 2, "temperature": 0}
        return request(gemma_server.port, post_json("/v1/chat/completions", body), timeout=300).json()["usage"]

    usages = run_concurrently(ask, [("Name a colour.",), ("Name a river.",)])
    cached = sorted(u["prompt_tokens_details"]["cached_tokens"] for u in usages)
    assert cached[1] > 600            # past Gemma 3's 512-token window: the copy held what it attends to
    metrics = request(gemma_server.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").body.decode()
    assert "localserve_prefix_waits_total 1" in metrics
    assert "prefix sharing is off" not in gemma_server.log
