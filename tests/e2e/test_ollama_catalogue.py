"""Ollama's model descriptions without loading, and tool calls streamed as they complete (issue 45).

A --models-dir catalogue under --max-models 1: /api/tags, /api/show and /v1/models describe every
model (family, parameter size, quantization, capabilities, template, context) from its GGUF
header, and /api/show loads none (Copilot Chat asks it of every model it lists: each load
would evict the one before). What the header says is what the loaded model says.

A scripted model writes two tool calls, the second with a long argument: the first call's
line reaches the client while the model still writes the second (the client leaves then, and
the job is cancelled mid-generation), as Ollama (0.8 on) streams each call once it is whole.
"""

from __future__ import annotations

import json
import shutil

import pytest

from clients import ollama_client
from conftest import ServerProcess
from rawhttp import RawConnection, post_json, request, request_id_of
from scripted_model import tool_call_token, write_scripted_gguf

FIRST = {"path": "a.txt"}
FILLERS = [f"x{i}" for i in range(600)]       # the second call's argument: 600 tokens
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {
    "type": "object", "properties": {key: {"type": "string"}}}}} for name, key in (("first", "path"),
                                                                                  ("second", "text"))]
ASK = [{"role": "user", "content": "Do both."}]
NAMES = ["agent:latest", "other:latest", "tiny:latest"]


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ollama-catalogue")
    for name in ("tiny", "other"):
        shutil.copy(tiny_model, folder / f"{name}.gguf")
    two_calls = [tool_call_token("first", FIRST), "<tool_call>", '{"name":"second","arguments":{"text":"',
                 *FILLERS, '"}}', "</tool_call>"]
    write_scripted_gguf(folder / "agent.gguf", [two_calls, ["Done."]], context_length=32768)
    srv = ServerProcess(None, "--models-dir", str(folder), "--max-models", "1", "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def get(server, path: str):
    return request(server.port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())


def post(server, path: str, body: dict):
    return request(server.port, post_json(path, body), timeout=60)


def loaded(server) -> list[str]:
    return [m["name"] for m in get(server, "/api/ps").json()["models"]]


# ---- descriptions without a load --------------------------------------------------------------------

def test_lists_and_show_describe_every_model_and_load_none(server):
    assert loaded(server) == []
    tags = {m["name"]: m["details"] for m in get(server, "/api/tags").json()["models"]}
    assert sorted(tags) == NAMES
    for details in tags.values():
        assert details["family"] == "llama" and details["families"] == ["llama"]
        assert details["parameter_size"] and details["quantization_level"] == "F32"
    for name in NAMES:
        shown = post(server, "/api/show", {"model": name}).json()
        assert shown["details"] == tags[name]
        assert shown["model_info"]["llama.context_length"] > 0 and "<|im_start|>" in shown["template"]
        assert shown["parameters"].startswith("num_ctx ")
    assert "tools" in post(server, "/api/show", {"model": "agent"}).json()["capabilities"]
    assert "tools" not in post(server, "/api/show", {"model": "tiny"}).json()["capabilities"]
    models = {m["id"]: m for m in get(server, "/v1/models").json()["data"]}
    assert all(m["state"] == "unloaded" and m["details"]["architecture"] == "llama" for m in models.values())
    assert loaded(server) == []                     # nothing was loaded to say all that


def test_a_load_finds_what_the_header_said(server):
    for name in NAMES:
        before = post(server, "/api/show", {"model": name}).json()
        assert post(server, "/api/chat", {"model": name, "messages": [], "stream": False}).json()["done_reason"] \
            == "load"
        assert loaded(server) == [name]             # --max-models 1: the one before was evicted
        after = post(server, "/api/show", {"model": name}).json()
        assert {k: v for k, v in after.items() if k != "parameters"} == \
               {k: v for k, v in before.items() if k != "parameters"}
        model = get(server, f"/v1/models/{name}").json()
        assert model["details"]["n_params"] == model["meta"]["n_params"]        # llama.cpp's own count
        assert model["details"]["n_ctx_train"] == model["meta"]["n_ctx_train"]
        assert after["parameters"] == f"{'num_ctx':<30} {model['meta']['n_ctx']}"


# ---- tool calls, each as soon as it is whole --------------------------------------------------------------

def ndjson_until(conn: RawConnection, wanted: str) -> tuple[bytes, list[dict]]:
    """The head, then the stream's lines (chunked) until one has `wanted`; the connection stays open."""
    head = b""
    while line := conn._line():
        head += line + b"\r\n"
    lines: list[dict] = []
    pending = b""
    while not any(wanted in line.get("message", {}) for line in lines):
        size = int(conn._line().split(b";")[0], 16)
        assert size, f"the stream ended before a line with {wanted}: {lines}"
        pending += conn._exact(size)
        conn._exact(2)
        *whole, pending = pending.split(b"\n")
        lines += [json.loads(line) for line in whole]
    return head, lines


def test_the_first_call_arrives_while_the_model_writes_the_second(server):
    conn = RawConnection(server.port, timeout=60)
    conn.send(post_json("/api/chat", {"model": "agent", "messages": ASK, "tools": TOOLS,
                                      "options": {"temperature": 0}}))
    head, lines = ndjson_until(conn, "tool_calls")
    conn.close()                                    # the client leaves at the first call
    calls = lines[-1]["message"]["tool_calls"]
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [("first", FIRST)]
    assert lines[-1]["done"] is False
    request_id = request_id_of(head + b"\r\n")
    assert server.wait_cancelled(request_id, "client went away during the stream"), server.log[-2000:]


def test_each_call_is_a_line_of_its_own(server):
    parts = list(ollama_client(server).chat(model="agent", messages=ASK, tools=TOOLS, stream=True,
                                            options={"temperature": 0}))
    calls = [(i, p.message.tool_calls) for i, p in enumerate(parts) if p.message.tool_calls]
    assert [[(c.function.name, dict(c.function.arguments)) for c in found] for _, found in calls] == [
        [("first", FIRST)], [("second", {"text": "".join(FILLERS)})]]
    assert [p.done for p in parts] == [False] * (len(parts) - 1) + [True] and parts[-1].done_reason == "stop"
    whole = ollama_client(server).chat(model="agent", messages=ASK, tools=TOOLS, options={"temperature": 0})
    assert [c.function.name for c in whole.message.tool_calls] == ["first", "second"]
