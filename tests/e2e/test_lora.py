"""LoRA adapters on the real engine (issue 51): tiny generated adapters (support/tinylora.py) of the
tiny model's output matrix, each with greedy text of its own.

One server: `--lora` four times at scale 0 (alpha and beta run only when a request asks; wide's
shapes are another model's; gemma's architecture is another), so a plain request is the base's.
Pinned: the per-request `lora` field (the SDK's extra_body), drafts verified under the request's
adapters, the `base+adapter` model names
(answers carry them; the lists show them; Ollama's client reaches them), GET/POST /lora-adapters
rescaling, two requests of different adapters at once each getting its text alone, prompt
caches never crossing adapter sets (cached_tokens) nor slot files, and bad adapters refused in
each dialect's error shape while the server goes on.
"""

from __future__ import annotations

import json
import threading

import pytest

from clients import ollama_client, openai_sdk
from conftest import CHATML_TEMPLATE, ServerProcess
from rawhttp import RawConnection, post_json, request
from sse import sse_data
from tinylora import write_tiny_lora
from tinymodel import NO_EOG, byte_token_id, write_tiny_gguf

ALPHA, BETA, WIDE, GEMMA = 0, 1, 2, 3
PROMPT = [{"role": "user", "content": "Say something."}]


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("lora")
    model = write_tiny_gguf(folder / "tiny.gguf", chat_template=CHATML_TEMPLATE, fim="fim")
    write_tiny_lora(folder / "alpha.gguf", model, seed=1)
    write_tiny_lora(folder / "beta.gguf", model, seed=2)
    write_tiny_lora(folder / "wide.gguf", model, seed=3, n_embd=32)
    write_tiny_lora(folder / "gemma.gguf", model, seed=4, arch="gemma3")
    adapters = [arg for name in ("alpha", "beta", "wide", "gemma") for arg in ("--lora", f"{folder / name}.gguf:0")]
    srv = ServerProcess(model, "--model-id", "tiny", "--slots", "2", *adapters, "--slot-save-path", str(folder / "saved"),
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


def call(server, path: str, body: dict | list, method: str = "POST"):
    data = post_json(path, body) if method == "POST" else f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode()
    return request(server.port, data, timeout=60)


def chat(server, *, model: str = "tiny", messages=PROMPT, max_tokens: int = 24, **extra) -> dict:
    resp = call(server, "/v1/chat/completions", {"model": model, "messages": messages, "max_tokens": max_tokens,
                                                 "temperature": 0, "logit_bias": NO_EOG, **extra})
    assert resp.status == 200, resp.body
    return resp.json()


def text(answer: dict) -> str:
    return answer["choices"][0]["message"]["content"]


@pytest.fixture(scope="module")
def alone(lora_server) -> dict:
    """Each adapter set's greedy text for PROMPT, each request alone."""
    return {"base": text(chat(lora_server)), "alpha": text(chat(lora_server, lora=[{"id": ALPHA, "scale": 1}])),
            "beta": text(chat(lora_server, lora=[{"id": BETA, "scale": 1.0}]))}


def test_each_adapter_has_text_of_its_own_and_scale_zero_is_the_base(lora_server, alone):
    assert len({alone["base"], alone["alpha"], alone["beta"]}) == 3
    assert text(chat(lora_server, lora=[{"id": ALPHA, "scale": 0}, {"id": BETA, "scale": 0}])) == alone["base"]
    half = text(chat(lora_server, lora=[{"id": ALPHA, "scale": 0.5}]))
    assert half not in (alone["alpha"], alone["base"])      # the scale is applied, not on/off
    client = openai_sdk(lora_server)
    answer = client.chat.completions.create(model="tiny", messages=PROMPT, max_tokens=24, temperature=0,
                                            logit_bias=NO_EOG, extra_body={"lora": [{"id": BETA, "scale": 1}]})
    assert answer.choices[0].message.content == alone["beta"]


def test_an_adapter_is_a_model_of_its_own(lora_server, alone):
    answer = chat(lora_server, model="tiny+alpha")
    assert (text(answer), answer["model"]) == (alone["alpha"], "tiny+alpha")
    listed = {m["id"]: m for m in call(lora_server, "/v1/models", {}, "GET").json()["data"]}
    assert listed["tiny+beta"]["parent"] == "tiny" and listed["tiny+beta"]["root"].endswith("beta.gguf")
    assert call(lora_server, "/v1/models/tiny+beta", {}, "GET").json()["id"] == "tiny+beta"
    ollama = ollama_client(lora_server)
    assert "tiny+beta:latest" in [m.model for m in ollama.list().models]
    said = ollama.chat(model="tiny+beta", messages=PROMPT, options={"temperature": 0, "num_predict": 8})
    assert said.model == "tiny+beta" and alone["beta"].startswith(said.message.content)


def test_global_scales_are_listed_and_set(lora_server, alone):
    listed = call(lora_server, "/lora-adapters", {}, "GET").json()
    assert [(a["id"], a["scale"], a["path"].rsplit("/", 1)[-1]) for a in listed] == [
        (0, 0.0, "alpha.gguf"), (1, 0.0, "beta.gguf"), (2, 0.0, "wide.gguf"), (3, 0.0, "gemma.gguf")]
    assert "error" in listed[WIDE] and "error" not in listed[ALPHA]
    try:
        assert call(lora_server, "/lora-adapters", [{"id": BETA, "scale": 1}]).json() == {"success": True}
        assert [a["scale"] for a in call(lora_server, "/lora-adapters", {}, "GET").json()] == [0.0, 1.0, 0.0, 0.0]
        assert text(chat(lora_server)) == alone["beta"]             # a request that chooses none
        assert text(chat(lora_server, lora=[])) == alone["base"]    # one that chooses none of them
        assert text(chat(lora_server, model="tiny+alpha")) == alone["alpha"]
    finally:
        call(lora_server, "/lora-adapters", [])
    assert text(chat(lora_server)) == alone["base"]


def test_drafts_are_verified_under_the_requests_adapters(lora_server):
    """Speculation (ngram, the default) with a prediction to draft from: a draft of alpha's own
    text is accepted under alpha, and the text is alpha's whatever is predicted (a draft
    verified under another set would turn into that set's tokens). Byte tokens are banned, so
    that a text is its tokens' bytes and can be given back as a prediction."""
    text_only = {**NO_EOG, **{str(byte_token_id(b)): -100 for b in range(256)}}

    def complete(**extra) -> dict:
        resp = call(lora_server, "/v1/completions", {"model": "tiny", "prompt": "the quick brown fox",
                                                     "max_tokens": 40, "temperature": 0, "logit_bias": text_only,
                                                     **extra})
        assert resp.status == 200, resp.body
        return resp.json()

    alpha = [{"id": ALPHA, "scale": 1}]
    own, base = complete(lora=alpha)["choices"][0]["text"], complete()["choices"][0]["text"]
    assert own != base
    for predicted in (own, base):
        answer = complete(lora=alpha, prediction={"type": "content", "content": predicted})
        assert answer["choices"][0]["text"] == own
        if predicted == own:
            assert answer["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] >= 20
    answer = complete(model="tiny+alpha", prediction={"type": "content", "content": own})
    assert answer["choices"][0]["text"] == own


def test_two_adapters_at_once_each_get_their_own_text(lora_server, alone):
    long = {"max_tokens": 400, "stream": True}
    body = {"model": "tiny", "messages": PROMPT, "temperature": 0, "logit_bias": NO_EOG, **long,
            "lora": [{"id": ALPHA, "scale": 1}]}
    solo = "".join(c["choices"][0]["delta"].get("content") or ""
                   for c in sse_data(call(lora_server, "/v1/chat/completions", body).body) if c["choices"])
    streamed = []

    def stream():
        conn = RawConnection(lora_server.port, timeout=60)
        conn.send(post_json("/v1/chat/completions", body))
        resp = conn.read_response(last=True)
        streamed.append(resp.body)
        conn.close()

    switches = call(lora_server, "/slots", {}, "GET").json()["models"]["tiny"]["lora"]["switches"]
    runner = threading.Thread(target=stream)
    runner.start()
    while not any(slot["busy"] for slot in call(lora_server, "/slots", {}, "GET").json()["slots"]):
        assert runner.is_alive()
    # the beta requests run while the long alpha one decodes: their steps take turns
    betas = [text(chat(lora_server, lora=[{"id": BETA, "scale": 1}])) for _ in range(3)]
    runner.join(60)
    together = "".join(c["choices"][0]["delta"].get("content") or "" for c in sse_data(streamed[0]) if c["choices"])
    assert betas == [alone["beta"]] * 3
    assert together == solo and together.startswith(alone["alpha"])
    assert call(lora_server, "/slots", {}, "GET").json()["models"]["tiny"]["lora"]["switches"] > switches + 2


def test_prompt_caches_never_cross_adapter_sets(lora_server):
    """The prompt is new to every set: each set may reuse no more than the chat template's head its
    earlier requests left (a few tokens); alpha's second run reuses it."""
    messages = [{"role": "user", "content": "A prompt of its own, long enough to be worth a cache: " * 4}]

    def run(**lora) -> tuple[str, int, int]:
        answer = chat(lora_server, messages=messages, max_tokens=8, **lora)
        usage = answer["usage"]
        return text(answer), usage["prompt_tokens_details"]["cached_tokens"], usage["prompt_tokens"]

    first, head, n_prompt = run(lora=[{"id": ALPHA, "scale": 1}])
    assert head < n_prompt // 4
    assert run()[1] < n_prompt // 4                                  # the base: nothing of alpha's
    assert run(lora=[{"id": BETA, "scale": 1}])[1] < n_prompt // 4       # beta: nothing of alpha's or the base's
    assert run(lora=[{"id": ALPHA, "scale": 0.5}])[1] < n_prompt // 4    # alpha at another scale is another set
    again, cached, _ = run(lora=[{"id": ALPHA, "scale": 1}])
    assert cached > n_prompt // 2 and again == first                 # its own prefix, kept (a slot or RAM)


def test_a_slot_saved_under_an_adapter_restores_for_that_adapter_set_alone(lora_server):
    """/slots/N?action=save of a slot whose prompt ran under alpha saves it (it was saved empty),
    with the set named in the file; restored, alpha's request reuses it and the base's does not."""
    prompt = "A slot saved under an adapter: " + "lorem ipsum dolor sit amet " * 5
    alpha = {"prompt": prompt, "n_predict": 2, "id_slot": 0, "lora": [{"id": ALPHA, "scale": 1}]}
    first = call(lora_server, "/completion", alpha).json()
    saved = call(lora_server, "/slots/0?action=save", {"filename": "alpha.bin"}).json()
    assert saved["n_saved"] >= first["tokens_evaluated"]

    def restored_then(body: dict) -> int:
        for slot in (0, 1):
            assert call(lora_server, f"/slots/{slot}?action=erase", {}).status == 200
        done = call(lora_server, "/slots/0?action=restore", {"filename": "alpha.bin"}).json()
        assert done["n_restored"] == saved["n_saved"]
        return call(lora_server, "/completion", body).json()["timings"]["cache_n"]

    assert restored_then(alpha) == first["tokens_evaluated"] - 1
    others = ([], [{"id": ALPHA, "scale": 0.5}], [{"id": BETA, "scale": 1}])
    for lora in others:     # at most the BOS another prompt of that set left (the RAM cache)
        assert restored_then({**alpha, "lora": lora}) <= 1


BAD = [([{"id": 7, "scale": 1}], "no LoRA adapter 7"),
       ([{"id": ALPHA, "scale": 9}], "LORA_SCALE_LIMIT"),
       ([{"id": WIDE, "scale": 1}], "'wide'"),
       ([{"id": GEMMA, "scale": 1}], "gemma3 architecture"),
       ({"id": ALPHA}, "expected an array")]


@pytest.mark.parametrize("lora, said", BAD)
def test_bad_adapters_are_refused_in_chat(lora_server, lora, said):
    resp = call(lora_server, "/v1/chat/completions", {"model": "tiny", "messages": PROMPT, "lora": lora})
    assert resp.status == 400 and said in resp.json()["error"]["message"]
    assert resp.json()["error"]["param"] == "lora"


def test_an_adapter_model_that_cannot_run_is_refused(lora_server):
    resp = call(lora_server, "/v1/chat/completions", {"model": "tiny+gemma", "messages": PROMPT})
    assert resp.status == 400 and "gemma3 architecture" in resp.json()["error"]["message"]
    resp = call(lora_server, "/lora-adapters", [{"id": WIDE, "scale": 1}])
    assert resp.status == 400 and "'wide'" in resp.json()["error"]["message"]
    assert call(lora_server, "/lora-adapters", [{"id": ALPHA, "scale": -5}]).status == 400
    assert [a["scale"] for a in call(lora_server, "/lora-adapters", {}, "GET").json()] == [0.0] * 4


UNKNOWN = [{"id": 9, "scale": 1}]
DIALECTS = [
    ("/v1/completions", {"prompt": "x", "max_tokens": 2}, lambda b: b["error"]["message"]),
    ("/v1/responses", {"input": "x", "max_output_tokens": 16}, lambda b: b["error"]["message"]),
    ("/v1/messages", {"messages": PROMPT, "max_tokens": 2}, lambda b: b["type"] == "error" and b["error"]["message"]),
    ("/api/chat", {"messages": PROMPT, "stream": False}, lambda b: b["error"]),
    ("/api/generate", {"prompt": "x", "stream": False}, lambda b: b["error"]),
    ("/completion", {"prompt": "x", "n_predict": 2}, lambda b: b["error"]["code"] == 400 and b["error"]["message"]),
    ("/infill", {"input_prefix": "a", "input_suffix": "b", "n_predict": 2}, lambda b: b["error"]["message"]),
]


@pytest.mark.parametrize("path, body, message", DIALECTS, ids=[d[0] for d in DIALECTS])
def test_an_unknown_adapter_is_refused_in_each_dialect(lora_server, alone, path, body, message):
    resp = call(lora_server, path, {"model": "tiny", **body, "lora": UNKNOWN})
    assert resp.status == 400, resp.body
    assert "no LoRA adapter 9" in message(resp.json())
    resp = call(lora_server, path, {"model": "tiny", **body, "lora": [{"id": ALPHA, "scale": 1}]})
    assert resp.status == 200, resp.body


def test_the_server_serves_on(lora_server, alone):
    assert text(chat(lora_server)) == alone["base"]
    assert json.loads(call(lora_server, "/health", {}, "GET").body)["status"] == "ok"
