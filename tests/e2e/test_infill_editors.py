"""The requests llama.vim and llama.vscode send to /infill, replayed as raw HTTP.

The bodies carry the fields and defaults the editors' sources use (llama.vim's autoload/llama.vim:
llama#fim and s:ring_update; llama.vscode's src/llama-server.ts: createRequestPayload), and the
headers their HTTP clients add (curl for llama.vim, axios for llama.vscode).
"""

from __future__ import annotations

import json

import pytest

from conftest import ServerProcess
from rawhttp import RawConnection
from tinymodel import CHATML_TEMPLATE, write_tiny_gguf

LLAMA_VIM_FIELDS = ["content", "timings/prompt_n", "timings/prompt_ms", "timings/prompt_per_token_ms",
                    "timings/prompt_per_second", "timings/predicted_n", "timings/predicted_ms",
                    "timings/predicted_per_token_ms", "timings/predicted_per_second", "truncated", "tokens_cached"]

CHUNKS = [{"text": "def area(r):\n    return 3.14159 * r * r\n", "time": [1733245000, 120394],
           "filename": "geometry.py"},
          {"text": "import math\n\nTAU = 2 * math.pi\n", "time": [1733245003, 5031], "filename": "consts.py"}]


@pytest.fixture(scope="module")
def editor_server(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("editor-model") / "coder.gguf", chat_template=CHATML_TEMPLATE,
                           fim="repo")
    srv = ServerProcess(path, "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def curl_post(port: int, body: dict) -> bytes:
    """What `curl --silent --no-buffer --request POST --header 'Content-Type: application/json'
    --data @-` sends."""
    payload = json.dumps(body).encode()
    return (f"POST /infill HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n").encode() + payload


def axios_post(port: int, body: dict) -> bytes:
    """What axios.post(url, body) sends from Node."""
    payload = json.dumps(body, separators=(",", ":")).encode()
    return (f"POST /infill HTTP/1.1\r\nAccept: application/json, text/plain, */*\r\n"
            f"Content-Type: application/json\r\nUser-Agent: axios/1.7.9\r\nContent-Length: {len(payload)}\r\n"
            f"Accept-Encoding: gzip, compress, deflate, br\r\nHost: 127.0.0.1:{port}\r\nConnection: keep-alive\r\n"
            f"\r\n").encode() + payload


def exchange(port: int, raw: bytes) -> dict:
    conn = RawConnection(port, timeout=60)
    try:
        conn.send(raw)
        resp = conn.read_response()
    finally:
        conn.close()
    assert resp.status == 200, resp.body
    return resp.json()


def test_llama_vim_ring_update_then_completion(editor_server):
    port = editor_server.port
    warm = exchange(port, curl_post(port, {
        "input_prefix": "", "input_suffix": "", "input_extra": CHUNKS, "prompt": "", "n_predict": 0,
        "temperature": 0.0, "stream": False, "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 1,
        "t_max_predict_ms": 1, "response_fields": [""]}))
    assert warm == {}           # llama-server answers only the fields asked for: none here
    answer = exchange(port, curl_post(port, {
        "input_prefix": "import math\n\ndef circumference(r):\n", "input_suffix": "\n\nprint(circumference(2))\n",
        "input_extra": CHUNKS, "prompt": "    return ", "n_predict": 256, "n_indent": 4, "top_k": 40, "top_p": 0.99,
        "stream": False, "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "t_max_prompt_ms": 500,
        "t_max_predict_ms": 1500, "response_fields": LLAMA_VIM_FIELDS}))
    assert set(answer) == set(LLAMA_VIM_FIELDS)
    assert isinstance(answer["content"], str) and answer["truncated"] is False
    assert answer["timings/predicted_n"] <= 256
    # the warm-up's chunks were reused: the prompt held less to evaluate than the chunks alone make
    prompt_tokens = answer["tokens_cached"] - answer["timings/predicted_n"]
    chunk_chars = sum(len(c["text"]) + len(c["filename"]) for c in CHUNKS)
    assert prompt_tokens - answer["timings/prompt_n"] >= chunk_chars // 2, answer


def test_llama_vscode_preparation_then_completion(editor_server):
    port = editor_server.port
    chunks = [{"text": c["text"], "time": 1733245000123, "filename": c["filename"]} for c in CHUNKS]
    warm = exchange(port, axios_post(port, {
        "input_prefix": "", "input_suffix": "", "input_extra": chunks, "prompt": "", "n_predict": 0,
        "samplers": [], "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1}))
    assert warm["tokens_predicted"] == 0 and warm["stop"] is True
    answer = exchange(port, axios_post(port, {
        "input_prefix": "const area = (r) => {\n", "input_suffix": "\n};\n", "input_extra": chunks,
        "prompt": "  return ", "n_predict": 128, "top_k": 40, "top_p": 0.99, "stream": False,
        "samplers": ["top_k", "top_p", "infill"], "cache_prompt": True, "n_indent": 2, "t_max_prompt_ms": 500,
        "t_max_predict_ms": 2500}))
    # the fields llama.vscode reads (its LlamaResponse)
    assert isinstance(answer["content"], str) and isinstance(answer["generation_settings"], dict)
    assert answer["truncated"] is False and answer["tokens_predicted"] <= 128
    assert {"prompt_n", "prompt_ms", "prompt_per_second", "predicted_n", "predicted_ms",
            "predicted_per_second"} <= set(answer["timings"])
    assert answer["timings"]["cache_n"] >= warm["tokens_evaluated"] - 2
