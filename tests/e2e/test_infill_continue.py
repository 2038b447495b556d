"""The requests Continue sends for autocomplete, replayed as raw HTTP.

The bodies follow Continue's source (continuedev/continue, core/): autocomplete/CompletionProvider.ts
sets temperature 0.01 and, for the `openai` provider, the legacy Completions endpoint;
autocomplete/templating/ renders the model family's FIM template (a model named qwen…coder gets
the Qwen repository template, other files as `<|file_sep|>` sections) and adds "/src/",
"#- coding: utf-8" and "```" to the template's stop words. The `openai` provider
(llm/llms/OpenAI.ts, _legacystreamComplete) posts that rendered text as `prompt` with model,
max_tokens (4096 unless configured), temperature, stop and stream; it sends an `api-key` header,
empty without a key. The `ollama` provider (llm/llms/Ollama.ts) asks /api/show first, then sends
`prompt` and `suffix` to /api/generate when the model's template mentions `.Suffix`, with
`options` (temperature, num_predict, stop, num_ctx 8192) and keep_alive 1800, no `stream` (Ollama
streams by default); otherwise its own rendered template with `raw: true`. Continue's HTTP client
is node-fetch 3.

The model is a tiny one carrying Qwen2.5-Coder's FIM token texts, so Continue's Qwen template is
the prompt it would send.
"""

from __future__ import annotations

import json

import pytest

from conftest import ServerProcess
from rawhttp import RawConnection
from sse import sse_data
from tinymodel import CHATML_TEMPLATE, token_ids, write_tiny_gguf

QWEN_FIM = {"pre": "<|fim_prefix|>", "suf": "<|fim_suffix|>", "mid": "<|fim_middle|>", "pad": "<|fim_pad|>",
            "rep": "<|repo_name|>", "sep": "<|file_sep|>"}
MODEL = "qwen2.5-coder:1.5b"
QWEN_STOPS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
              "<|file_sep|>", "<|im_start|>", "<|im_end|>", "/src/", "#- coding: utf-8", "```"]
PREFIX = "import math\n\ndef circumference(r):\n    return "
SUFFIX = "\n\nprint(circumference(2))\n"
SNIPPET = "def area(r):\n    return 3.14159 * r * r\n"


@pytest.fixture(scope="module")
def qwen_like(tmp_path_factory):
    specials = [*QWEN_FIM.values(), "<|endoftext|>"]
    ids = token_ids(specials)
    path = write_tiny_gguf(tmp_path_factory.mktemp("continue-model") / "qwen-coder.gguf",
                           chat_template=CHATML_TEMPLATE, special_tokens=specials,
                           extra_metadata={f"tokenizer.ggml.fim_{role}_token_id": ids[text]
                                           for role, text in QWEN_FIM.items()})
    # named as Continue's config names it: Ollama's routes answer a name the catalogue has (or a 404)
    srv = ServerProcess(path, "--model-id", MODEL, "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def node_fetch(port: int, path: str, body: dict, headers: dict[str, str]) -> bytes:
    """What node-fetch 3 sends for fetch(url, {method: "POST", headers, body: JSON.stringify(body)})."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    lines = [f"POST {path} HTTP/1.1", *(f"{k}: {v}" for k, v in headers.items()), "Accept: */*",
             f"Content-Length: {len(payload)}", "User-Agent: node-fetch", "Accept-Encoding: gzip, deflate, br",
             f"Host: 127.0.0.1:{port}", "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload


def exchange(port: int, raw: bytes):
    conn = RawConnection(port, timeout=60)
    try:
        conn.send(raw)
        return conn.read_response()
    finally:
        conn.close()


def qwen_repository_prompt() -> str:
    """Continue's qwenMultifileFimTemplate with one snippet from another file."""
    return (f"<|repo_name|>project\n<|file_sep|>geometry.py\n{SNIPPET}\n<|file_sep|>circle.py\n"
            f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>")


def test_openai_provider_streams_a_completion_of_its_own_fim_prompt(qwen_like):
    port = qwen_like.port
    body = {"model": MODEL, "max_tokens": 4096, "temperature": 0.01, "stream": True, "stop": QWEN_STOPS,
            "prompt": qwen_repository_prompt()}
    resp = exchange(port, node_fetch(port, "/v1/completions", body,
                                     {"Content-Type": "application/json", "api-key": ""}))
    assert resp.status == 200, resp.body
    assert resp.header("content-type").startswith("text/event-stream")
    assert resp.body.rstrip().endswith(b"data: [DONE]")
    chunks = sse_data(resp.body)
    # what Continue reads: choices[0].text of each chunk, and no top-level finish_reason "eos"
    assert all(isinstance(c["choices"][0]["text"], str) and c.get("finish_reason") != "eos" for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    text = "".join(c["choices"][0]["text"] for c in chunks)
    assert not any(stop in text for stop in QWEN_STOPS)


def test_ollama_provider_finds_the_suffix_in_the_template_then_sends_it(qwen_like):
    port = qwen_like.port
    show = exchange(port, node_fetch(port, "/api/show", {"name": MODEL}, {"Content-Type": "application/json"}))
    assert show.status == 200
    template = show.json()["template"]
    assert ".Suffix" in template           # Continue's test for a model that can fill in the middle
    assert "<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>" in template
    body = {"model": MODEL, "prompt": PREFIX, "suffix": SUFFIX,
            "options": {"temperature": 0.01, "num_predict": 4096, "stop": QWEN_STOPS, "num_ctx": 8192},
            "keep_alive": 1800}
    resp = exchange(port, node_fetch(port, "/api/generate", body, {"Content-Type": "application/json"}))
    assert resp.status == 200, resp.body
    assert resp.header("content-type").startswith("application/x-ndjson")
    lines = [json.loads(line) for line in resp.body.decode().splitlines() if line.strip()]
    assert all("response" in line for line in lines)       # what Continue reads of each line
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    assert lines[-1]["done_reason"] in ("stop", "length")
    assert not any(stop in "".join(line["response"] for line in lines) for stop in QWEN_STOPS)


def test_ollama_provider_without_fim_support_sends_its_own_template_raw(qwen_like):
    """Continue's path for a model whose template has no `.Suffix` (another server's): `raw`."""
    port = qwen_like.port
    body = {"model": MODEL, "prompt": f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>", "raw": True,
            "options": {"temperature": 0.01, "num_predict": 4096, "stop": QWEN_STOPS, "num_ctx": 8192},
            "keep_alive": 1800}
    resp = exchange(port, node_fetch(port, "/api/generate", body, {"Content-Type": "application/json"}))
    assert resp.status == 200, resp.body
    lines = [json.loads(line) for line in resp.body.decode().splitlines() if line.strip()]
    assert lines[-1]["done"] is True and lines[-1]["prompt_eval_count"] > 0
