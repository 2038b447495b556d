"""End to end on the real demo model (SmolLM2-135M-Instruct Q4_1), served by default without
--model: fetched as the server fetches it (localserve/ops/demo.py), it answers a question, in
every client and in the page.

A 135M model sits near its decision boundaries: asked the bare question under its template's
default system prompt, its greedy answer starts in French ("L'Étoile, …", 0.35 nats ahead of
"The"); asked for one sentence it answers, every greedy step a clear margin ahead.
"""

from __future__ import annotations

import json

import pytest

from clients import anthropic_sdk, openai_sdk
from conftest import ROOT, ServerProcess
from needs import demo_model

from localserve.ops.demo import DEMO_MODEL_NAME

QUESTION = "What is the capital of France? Answer in one sentence."
ASKED = [{"role": "user", "content": QUESTION}]
SHOTS = ROOT / "test-output" / "demo"


@pytest.fixture(scope="module")
def demo_server():
    demo_model()        # fetched (or the test fails or skips saying why) before the server needs it
    srv = ServerProcess(None, "--ctx-size", "2048", "--slots", "2", "--no-store")   # no --model: the demo model
    yield srv
    srv.stop()


@pytest.fixture
def client(demo_server):
    return openai_sdk(demo_server, api_key="x")


def test_the_demo_model_is_the_default_and_its_own_template_prompts_it(demo_server, client):
    assert client.models.list().data[0].id == DEMO_MODEL_NAME.removesuffix(".gguf")
    assert "no --model given: serving the demo model (SmolLM2-135M-Instruct Q4_1)" in demo_server.log
    assert "chat template gguf:tokenizer.chat_template" in demo_server.log


def test_the_demo_model_answers_whole_and_streamed(client):
    reply = client.chat.completions.create(model="x", messages=ASKED, max_tokens=32, temperature=0)
    answer = reply.choices[0].message.content
    assert "Paris" in answer and reply.choices[0].finish_reason == "stop", answer
    assert "<|im_end|>" not in answer and "<|im_start|>" not in answer
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in client.chat.completions.create(
        model="x", messages=ASKED, max_tokens=32, temperature=0, stream=True) if chunk.choices)
    assert streamed == answer


def test_the_demo_model_answers_an_anthropic_client_too(demo_server):
    reply = anthropic_sdk(demo_server).messages.create(model="x", max_tokens=32, messages=ASKED,
                                                       extra_body={"temperature": 0})
    assert "Paris" in reply.content[0].text and reply.stop_reason == "end_turn"


def test_weights_kept_out_of_amx_unless_asked(demo_server):
    """--cpu-weights auto keeps AMX out on a CPU that has it (llama.cpp #20824), for Q4_1 too."""
    from rawhttp import request
    meta = request(demo_server.port, b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n").json()["data"][0]["meta"]
    assert meta["cpu_weights"] == "auto"
    assert "AMX" not in meta["weight_buffers_mib"] and meta["weight_buffers_mib"]


@pytest.fixture(scope="module")
def browser(chromium):
    yield chromium.lend(SHOTS)
    chromium.park()


def test_the_page_shows_the_demo_models_answer(demo_server, browser):
    from selenium.webdriver.common.keys import Keys
    browser.open(demo_server.base_url + "/")
    browser.wait(lambda: browser.js("return document.getElementById('model').options.length") > 0,
                 "the model picker was never filled from /v1/models")
    browser.js("const e = document.getElementById('extra-fields'); e.value = arguments[0];"
               "e.dispatchEvent(new Event('change', {bubbles: true}))", json.dumps({"temperature": 0}))
    before = int(browser.js("return document.getElementById('messages').dataset.finished || '0'"))
    box = browser.el("#prompt")
    box.send_keys(QUESTION)
    box.send_keys(Keys.ENTER)
    browser.wait(lambda: int(browser.js("return document.getElementById('messages').dataset.finished || '0'"))
                 > before, "the answer never finished", 120)
    answer = browser.text("#messages .message.assistant:last-child .content")
    browser.screenshot("demo-answer")
    assert "Paris" in answer, answer
