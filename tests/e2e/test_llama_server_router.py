"""llama-server's router API on a catalogue: GET /models with each model's status, GET /models/sse
as models load and unload (read as Zed's llama.cpp provider reads it) with a load's progress,
open streams that cost no wake-ups while nothing changes, the limit on open streams; /props
naming its model, and /reranking on a reranker of the catalogue."""

from __future__ import annotations

import json
import threading
import time

import pytest

from conftest import ServerProcess
from embedmodels import write_pooled_decoder, write_tiny_bert
from procstat import context_switches
from rawhttp import RawConnection, post_json, request

from localserve.dialects.llamacpp.models import MAX_SSE_STREAMS, MAX_SSE_STREAMS_PER_CLIENT, SSE_CLIENT_CHECK

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
        self.conn = stream(server, b"Accept: text/event-stream\r\nAuthorization: Bearer none\r\n")
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


def stream(server, headers: bytes = b"", wait: float = 20.0, source: str | None = None) -> RawConnection:
    """A /models/sse stream whose head has come. Streams an earlier test closed hold their places
    until the server looks at their sockets (SSE_CLIENT_CHECK): a 503 is tried again for `wait` s."""
    deadline = time.monotonic() + wait
    while True:
        conn = RawConnection(server.port, timeout=30, source=source)
        conn.send(b"GET /models/sse HTTP/1.1\r\nHost: localhost\r\n" + headers + b"\r\n")
        head = b""
        while b"\r\n\r\n" not in head:
            head += conn.sock.recv(1)
        if head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head:
            return conn
        conn.close()
        assert head.startswith(b"HTTP/1.1 503") and time.monotonic() < deadline, head
        time.sleep(0.25)


def open_streams(server, n: int) -> list[RawConnection]:
    """n /models/sse streams whose heads have come (nothing more is read from them), from as many
    loopback addresses as MAX_SSE_STREAMS_PER_CLIENT needs (127.0.0.2 on: 127.0.0.1 stays free)."""
    return [stream(server, source=f"127.0.0.{2 + i // MAX_SSE_STREAMS_PER_CLIENT}") for i in range(n)]


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


def test_a_load_reports_its_progress_then_loaded(router):
    post(router, "/models/unload", {"model": "chat"})      # loaded by an earlier test, perhaps
    events = ModelEvents(router)
    try:
        assert post(router, "/models/load", {"model": "chat"}).status == 200
        events.wait_for("chat", "loaded")
        mine = [e["data"] for e in events.events if e["model"] == "chat"]
        progress = [d["progress"] for d in mine if "progress" in d]
        assert {d["status"] for d in mine if "progress" in d} == {"loading"}
        assert progress[0] == {"stages": ["text_model"], "current": "text_model", "value": 0.0}
        assert progress[-1]["value"] == 1.0
        values = [p["value"] for p in progress]
        assert values == sorted(values)
        assert mine.index({"status": "loading"}) < mine.index({"status": "loading", "progress": progress[0]})
        assert mine[-1] == {"status": "loaded"}
    finally:
        events.close()
        post(router, "/models/unload", {"model": "chat"})


def test_open_streams_sleep_until_a_change(router):
    """32 streams open and nothing changing: the server hardly wakes (each stream looked at its
    model table 4 times a second: 384 wake-ups in 3 s); a change still reaches each at once."""
    post(router, "/models/unload", {"model": "ranker"})
    conns = open_streams(router, 32)
    try:
        time.sleep(0.5)
        before = context_switches(router.proc.pid)
        time.sleep(3)
        woken = context_switches(router.proc.pid) - before
        assert woken < 300, woken         # an idle server alone: under 300 in 3 s (test_clocks.py)
        assert post(router, "/models/load", {"model": "ranker"}).status == 200
        for conn in conns:
            conn.sock.settimeout(10)
            seen = b""
            while b'"loaded"' not in seen:
                seen += conn.sock.recv(65536)
    finally:
        for conn in conns:
            conn.close()
        post(router, "/models/unload", {"model": "ranker"})


def test_streams_past_the_limit_are_a_503_in_llama_servers_shape(router):
    conns = open_streams(router, MAX_SSE_STREAMS)
    try:
        refused = request(router.port, b"GET /models/sse HTTP/1.1\r\nHost: localhost\r\n\r\n", timeout=10)
        assert refused.status == 503 and refused.header("retry-after") == "5"
        error = refused.json()["error"]
        assert error["code"] == 503 and error["type"] == "unavailable_error" and "/models/sse" in error["message"]
        assert get(router, "/models").status == 200          # the rest of the server serves on
        conns.pop().close()
        conns.append(stream(router, wait=SSE_CLIENT_CHECK + 10))    # its place, once the server looked
    finally:
        for conn in conns:
            conn.close()


def test_one_client_holds_at_most_its_share_of_the_streams(router):
    """One client opening streams in a loop took all MAX_SSE_STREAMS: another address still gets one."""
    mine = [stream(router) for _ in range(MAX_SSE_STREAMS_PER_CLIENT)]
    try:
        refused = request(router.port, b"GET /models/sse HTTP/1.1\r\nHost: localhost\r\n\r\n", timeout=10)
        assert refused.status == 503 and refused.header("retry-after") == "5"
        error = refused.json()["error"]
        assert error["type"] == "unavailable_error" and "this client" in error["message"], error
        other = stream(router, source="127.0.0.200")
        other.close()
        mine.pop().close()
        mine.append(stream(router, wait=SSE_CLIENT_CHECK + 10))    # its own place back, once the server looked
    finally:
        for conn in mine:
            conn.close()


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
