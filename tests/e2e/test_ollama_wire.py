"""Ollama's API on the wire, read byte by byte: NDJSON framing (one object per line and nothing
else, the last `done: true` with integer durations), silence while a model loads (no SSE comment
an NDJSON parser would choke on), VS Code Copilot Chat's probe sequence, GET / for probes and
browsers, and errors in Ollama's shape on every kind of failure."""

from __future__ import annotations

import json
import shutil
import socket

import ollama
import pytest

from conftest import ServerProcess
from rawhttp import RawConnection, post_json, request
from scripted_model import tool_loop_script, write_scripted_gguf
from tinymodel import NO_EOG

DURATIONS = ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration")


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ollama-wire")
    for name in ("tiny", "other"):
        shutil.copy(tiny_model, folder / f"{name}.gguf")
    write_scripted_gguf(folder / "agent.gguf", tool_loop_script("ls", {}, "Done."))     # a template with tools
    srv = ServerProcess(None, "--models-dir", str(folder), "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def get(server, path: str, headers: str = "", method: str = "GET"):
    return request(server.port, f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode())


def post(server, path: str, body, headers: str = ""):
    return request(server.port, post_json(path, body, headers), timeout=60)


def ndjson_lines(body: bytes) -> list[dict]:
    assert body.endswith(b"\n"), body[-80:]
    lines = body[:-1].split(b"\n")
    for line in lines:
        assert line.startswith(b"{") and line.endswith(b"}"), line[:80]   # no comment, no blank, no SSE
    return [json.loads(line) for line in lines]


def loaded_names(server) -> list[str]:
    return [m["name"] for m in get(server, "/api/ps").json()["models"]]


def assert_last_line(last: dict) -> None:
    assert last["done"] is True and last["done_reason"] in ("stop", "length")
    for name in DURATIONS + ("prompt_eval_count", "eval_count"):
        assert type(last[name]) is int and last[name] >= 0, name
    assert last["total_duration"] >= last["eval_duration"] > 0


def test_a_chat_stream_is_ndjson_while_its_model_loads(server):
    assert "tiny:latest" not in loaded_names(server)          # the load happens inside this request
    resp = post(server, "/api/chat", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
                                      "options": {"num_predict": 8, "logit_bias": NO_EOG}})
    assert resp.status == 200 and resp.header("content-type") == "application/x-ndjson"
    lines = ndjson_lines(resp.body)
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    assert all(line["model"] == "tiny" and line["message"]["role"] == "assistant" for line in lines)
    assert all(line["created_at"].endswith("Z") for line in lines)
    assert_last_line(lines[-1])
    assert lines[-1]["eval_count"] == 8 and lines[-1]["done_reason"] == "length"
    assert lines[-1]["load_duration"] > 0
    assert "tiny:latest" in loaded_names(server)


def test_a_generate_stream_is_ndjson_too(server):
    resp = post(server, "/api/generate", {"model": "other:latest", "prompt": "hi",
                                          "options": {"num_predict": 4, "logit_bias": NO_EOG}})
    lines = ndjson_lines(resp.body)
    assert all("response" in line for line in lines) and lines[-1]["context"] == []
    assert_last_line(lines[-1])


def test_stream_false_is_one_object(server):
    resp = post(server, "/api/chat", {"model": "tiny", "stream": False,
                                      "options": {"num_predict": 3, "logit_bias": NO_EOG},
                                      "messages": [{"role": "user", "content": "hi"}]})
    assert resp.header("content-type") == "application/json"
    whole = resp.json()
    assert whole["done"] is True and whole["eval_count"] == 3
    assert_last_line(whole)


def test_a_named_tool_choice_forces_the_call(server):
    """Not Ollama's field: the AI SDK's Ollama provider sends Chat Completions' tool_choice, flat."""
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC"]}}, "required": ["zone"]}}}]
    whole = post(server, "/api/chat", {"model": "tiny", "stream": False, "tools": tools,
                                       "tool_choice": {"type": "function", "name": "get_time"},
                                       "options": {"num_predict": 200},
                                       "messages": [{"role": "user", "content": "time?"}]}).json()
    first = whole["message"]["tool_calls"][0]["function"]     # random weights may go on to another call
    assert (first["name"], first["arguments"]) == ("get_time", {"zone": "UTC"})


def test_load_and_unload_through_empty_requests(server):
    assert post(server, "/api/generate", {"model": "other", "keep_alive": 0}).json()["done_reason"] == "unload"
    assert "other:latest" not in loaded_names(server)
    streamed = post(server, "/api/chat", {"model": "other", "messages": []})
    assert streamed.header("content-type") == "application/x-ndjson"
    [answer] = ndjson_lines(streamed.body)
    assert answer["done_reason"] == "load" and answer["done"] is True and answer["message"]["content"] == ""
    assert "other:latest" in loaded_names(server)
    whole = post(server, "/api/chat", {"model": "other", "messages": [], "keep_alive": "0s", "stream": False})
    assert whole.header("content-type") == "application/json" and whole.json()["done_reason"] == "unload"
    assert "other:latest" not in loaded_names(server)


def test_copilot_chats_probe_sequence(server):
    version = get(server, "/api/version").json()["version"]
    assert tuple(int(part) for part in version.split(".")) >= (0, 6, 4)
    names = [m["name"] for m in get(server, "/api/tags").json()["models"]]
    assert names == ["agent:latest", "other:latest", "tiny:latest"]
    capabilities = {}
    for name in names:
        shown = post(server, "/api/show", {"model": name}).json()
        arch = shown["model_info"]["general.architecture"]
        assert isinstance(shown["model_info"][f"{arch}.context_length"], int)
        capabilities[name] = shown["capabilities"]
    assert "tools" in capabilities["agent:latest"] and "tools" not in capabilities["tiny:latest"]
    assert all("completion" in found for found in capabilities.values())


def test_the_root_answers_probes_and_browsers(server):
    probe = get(server, "/")
    assert probe.status == 200 and probe.body == b"Ollama is running"
    assert probe.header("content-type").startswith("text/plain")
    page = get(server, "/", "Accept: text/html,application/xhtml+xml\r\n")
    assert page.header("content-type").startswith("text/html") and b"<html" in page.body.lower()
    head = get(server, "/", method="HEAD")
    assert head.status == 200 and head.header("content-length") == str(len(b"Ollama is running"))
    for path in ("/api/version", "/api/tags", "/api/ps"):
        assert get(server, path, method="HEAD").status == 200


@pytest.mark.parametrize("send, status, words", [
    (lambda s: get(s, "/api/nothing"), 404, "/api/nothing"),
    (lambda s: get(s, "/api/chat"), 405, "not allowed"),
    (lambda s: post(s, "/api/chat", b"{not json"), 400, "JSON"),
    (lambda s: post(s, "/api/chat", {"messages": []}), 400, "model"),
    (lambda s: post(s, "/api/chat", {"model": "absent", "messages": [{"role": "user", "content": "x"}]}), 404,
     "absent"),
    (lambda s: post(s, "/api/chat", {"model": "tiny", "messages": "hi"}), 400, "messages"),
    (lambda s: post(s, "/api/chat", {"model": "tiny", "stream": "yes", "messages": []}), 400, "stream"),
    (lambda s: post(s, "/api/chat", {"model": "tiny", "format": 3, "messages": [{"role": "user", "content": "x"}]}),
     400, "format"),
    (lambda s: post(s, "/api/chat", {"model": "tiny", "options": [], "messages": [{"role": "user", "content": "x"}]}),
     400, "options"),
    (lambda s: post(s, "/api/chat", {"model": "tiny", "keep_alive": "soon", "messages": []}), 400, "keep_alive"),
    (lambda s: post(s, "/api/chat", {"model": "tiny", "tools": {}, "messages": [{"role": "user", "content": "x"}]}),
     400, "tools"),
    (lambda s: post(s, "/api/chat", {"model": "tiny", "messages": [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": [1]}}]}]}),
     400, "messages[0].tool_calls[0].function.arguments"),
    (lambda s: post(s, "/api/generate", {"model": "tiny", "prompt": 5}), 400, "prompt"),
    (lambda s: post(s, "/api/generate", {"model": "tiny", "prompt": "x", "context": "abc"}), 400, "context"),
    (lambda s: post(s, "/api/generate", {"model": "tiny", "prompt": "x", "images": ["aGk="]}), 400, "images"),
    (lambda s: post(s, "/api/embed", {"model": "tiny", "input": 5}), 400, "input"),
    (lambda s: post(s, "/api/embeddings", {"model": "tiny", "prompt": ["x"]}), 400, "prompt"),
    (lambda s: post(s, "/api/show", {"model": "absent"}), 404, "absent"),
])
def test_errors_are_ollamas_shape(server, send, status, words):
    resp = send(server)
    assert resp.status == status, resp.body[:300]
    body = resp.json()
    assert list(body) == ["error"] and words in body["error"], body


def test_a_prompt_longer_than_the_context_is_a_400_before_the_head(server):
    """(An error after the head, one `{"error"}` line, is in tests/unit/dialects/ollama/test_replies.py.)"""
    resp = post(server, "/api/chat", {"model": "tiny", "messages": [{"role": "user", "content": "word " * 5000}],
                                      "shift": False})      # else the prompt is cut to fit (test_ollama_shift.py)
    assert resp.status == 400 and "context" in resp.json()["error"]


def test_hosts_and_cross_site_posts_are_refused_here_too(server):
    foreign = request(server.port, b"GET /api/tags HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    assert foreign.status == 403 and "evil.example" in foreign.json()["error"]
    cross = post(server, "/api/chat", {"model": "tiny", "messages": []},
                 "Origin: http://evil.example\r\nSec-Fetch-Site: cross-site\r\n")
    assert cross.status == 403 and list(cross.json()) == ["error"]


def test_a_client_gone_mid_stream_cancels_the_job(server):
    conn = RawConnection(server.port, timeout=30)
    conn.send(post_json("/api/generate", {"model": "tiny", "prompt": "go", "raw": True,
                                          "options": {"num_predict": 100000, "logit_bias": NO_EOG}}))
    head = []
    while line := conn._line():     # the head: the stream has started
        head.append(line.decode("latin-1"))
    conn._line()                    # its first chunk: tokens are flowing
    conn.close()
    request_id = next(h.split(":", 1)[1].strip() for h in head if h.lower().startswith("request-id:"))
    assert server.wait_cancelled(request_id, "client went away during the stream"), server.log[-2000:]


def test_a_second_address_serves_the_same_app(tiny_model):
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--api-key", "k", "--no-store",
                        env={"LOCALSERVE_OLLAMA_LISTEN": "127.0.0.1:0"})     # any free port, named in the log
    try:
        second = srv.wait_listening(ollama_listen=True)
        assert second != srv.port
        assert srv.wait_log(f"also serving on http://127.0.0.1:{second} (--ollama-listen)")
        client = ollama.Client(host=f"http://127.0.0.1:{second}", headers={"Authorization": "Bearer k"})
        assert [m.model for m in client.list().models] == ["tiny:latest"]
        reply = client.generate(model="tiny", prompt="hi", options={"num_predict": 2, "logit_bias": NO_EOG})
        assert reply.eval_count == 2
        refused = request(second, b"GET /api/tags HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert refused.status == 401 and list(refused.json()) == ["error"]      # the same access rules
        assert request(second, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").body == b"Ollama is running"
    finally:
        assert srv.stop() == 0


def test_a_second_address_in_use_is_a_usage_error(tiny_model):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        srv = ServerProcess(tiny_model, "--ollama-listen", f"127.0.0.1:{port}", wait=False)
        assert srv.proc.wait(timeout=30) == 2
        assert "--ollama-listen" in srv.log
