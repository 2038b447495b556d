"""llama-server's router API on a catalogue: GET /models with each model's status, GET /models/sse
as models load and unload (read as Zed's llama.cpp provider reads it), /props naming its model,
and /reranking on a reranker of the catalogue."""

from __future__ import annotations

import json
import threading
import time

import pytest

from conftest import ServerProcess
from embedmodels import write_pooled_decoder, write_tiny_bert
from rawhttp import RawConnection, post_json, request

ERROR_KEYS = {"code", "message", "type"}


@pytest.fixture(scope="module")
def catalogue(models_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("router-models")
    write_pooled_decoder(folder / "chat.gguf", pooling="last")
    write_tiny_bert(folder / "ranker.gguf", pooling="rank", seed=3)
    return folder


@pytest.fixture(scope="module")
def router(catalogue):
    srv = ServerProcess(None, "--models-dir", str(catalogue), "--no-store", "--slots", "1")
    yield srv
    srv.stop()


def get(server, path: str, headers: str = ""):
    return request(server.port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode(), timeout=60)


def post(server, path: str, body: dict):
    return request(server.port, post_json(path, body), timeout=60)


def statuses(server) -> dict[str, str]:
    return {m["id"]: m["status"]["value"] for m in get(server, "/models").json()["data"]}


class ModelEvents:
    """GET /models/sse read line by line as Zed reads it: each `data:` line one JSON event,
    comments and blank lines skipped."""

    def __init__(self, server):
        self.conn = RawConnection(server.port, timeout=30)
        self.conn.send(b"GET /models/sse HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\n"
                       b"Authorization: Bearer none\r\n\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += self.conn.sock.recv(1)
        assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
        self.events: list[dict] = []
        self.text = b""
        self.partial = b""
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            while True:
                data = self.conn.sock.recv(65536)
                if not data:
                    return
                self.text += data
                *lines, self.partial = (self.partial + data).split(b"\n")
                self.events += [json.loads(line[5:].strip()) for line in lines if line.startswith(b"data:")]
        except OSError:
            return

    def wait_for(self, model: str, status: str, timeout: float = 30.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in self.events:
                if event["model"] == model and event.get("data", {}).get("status") == status:
                    return event
            time.sleep(0.05)
        raise AssertionError(f"no {status} event for {model}: {self.events}")

    def close(self) -> None:
        self.conn.close()


def test_the_listing_has_each_models_status_and_modalities(router):
    data = get(router, "/models").json()["data"]
    assert {m["id"] for m in data} == {"chat", "ranker"}
    for entry in data:
        assert entry["status"] == {"value": "unloaded", "args": []}
        assert entry["architecture"] == {"input_modalities": ["text"], "output_modalities": ["text"]}
    assert get(router, "/v1/models").json()["data"][0]["status"]["value"] == "unloaded"


def test_props_needs_a_name_until_one_model_is_loaded(router):
    error = get(router, "/props").json()["error"]
    assert ERROR_KEYS <= set(error) and error["code"] == 400 and "?model=" in error["message"]
    props = get(router, "/props?model=chat").json()       # loads it, as llama-server's router does
    assert props["model_alias"] == "chat" and props["default_generation_settings"]["n_ctx"] > 0
    assert get(router, "/props").json()["model_alias"] == "chat"      # the one loaded now
    missing = get(router, "/props?model=nothing")
    assert missing.status == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_the_event_stream_follows_loads_and_unloads(router):
    events = ModelEvents(router)
    try:
        assert post(router, "/models/load", {"model": "ranker"}).status == 200
        events.wait_for("ranker", "loaded")
        assert statuses(router)["ranker"] == "loaded"
        assert post(router, "/models/unload", {"model": "ranker"}).status == 200
        unloaded = events.wait_for("ranker", "unloaded")
        assert unloaded == {"model": "ranker", "event": "model_status", "data": {"status": "unloaded", "exit_code": 0}}
        kinds = [e["data"]["status"] for e in events.events if e["model"] == "ranker"]
        assert kinds.index("loaded") < kinds.index("unloaded")
    finally:
        events.close()


def test_reranking_is_rerank(router):
    body = {"model": "ranker", "query": "what is the capital of france?",
            "documents": ["paris is the capital of france", "a dog"]}
    for path in ("/reranking", "/v1/reranking"):
        resp = post(router, path, body)
        assert resp.status == 200, resp.body
        assert sorted(r["index"] for r in resp.json()["results"]) == [0, 1]
    assert post(router, "/rerank", body).json()["results"] == post(router, "/reranking", body).json()["results"]


def test_the_event_stream_ends_when_the_server_stops(catalogue):
    srv = ServerProcess(None, "--models-dir", str(catalogue), "--no-store", "--drain-timeout", "20")
    events = ModelEvents(srv)
    try:
        assert srv.stop() == 0
        events.thread.join(timeout=10)
        assert not events.thread.is_alive()
        assert events.text.endswith(b"0\r\n\r\n")        # the chunked stream ended cleanly
    finally:
        events.close()
