"""What an error tells a client (issue 28, item 7): a huge model name is not echoed whole, a
model that fails to load is named without the operator's file paths, and keep_alive takes ASCII
digits only."""

from __future__ import annotations

import pytest

from conftest import ServerProcess
from rawhttp import post_json, request

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory, tiny_model):
    folder = tmp_path_factory.mktemp("secret-operator-folder")
    (folder / "good.gguf").write_bytes(tiny_model.read_bytes())
    (folder / "broken.gguf").write_bytes(tiny_model.read_bytes()[:5000])
    return folder


@pytest.fixture(scope="module")
def srv(catalogue):
    server = ServerProcess(None, "--models-dir", str(catalogue), "--slots", "1", "--no-store")
    yield server
    server.stop()


def test_a_huge_model_name_is_cut_in_the_404(srv):
    name = "m" * 1_000_000
    resp = request(srv.port, post_json("/v1/chat/completions", {**CHAT, "model": name}), timeout=30)
    error = resp.json()["error"]
    assert resp.status == 404 and error["code"] == "model_not_found"
    assert len(resp.body) < 2000 and "(1000000 characters)" in error["message"]
    unload = request(srv.port, post_json("/models/unload", {"model": name}), timeout=30)
    assert unload.status == 404 and len(unload.body) < 2000


def test_a_failed_load_names_no_path_and_the_log_has_it(srv, catalogue):
    resp = request(srv.port, post_json("/v1/chat/completions", {**CHAT, "model": "broken"}), timeout=30)
    error = resp.json()["error"]
    assert resp.status == 500 and error["code"] == "model_load_failed"
    assert "broken.gguf" in error["message"] and str(catalogue) not in error["message"]
    listed = request(srv.port, b"GET /v1/models/broken HTTP/1.1\r\nHost: localhost\r\n\r\n").json()
    assert str(catalogue) not in listed["error"]
    assert srv.wait_log(str(catalogue / "broken.gguf"))        # the operator's log names the file whole


@pytest.mark.parametrize("path, body", [
    ("/v1/chat/completions", {**CHAT, "model": "good", "response_format": {"type": "y" * 1_000_000}}),
    ("/v1/messages", {**CHAT, "model": "good", "messages": [{"role": "user", "content": [{"type": "y" * 1_000_000}]}]}),
    ("/v1/responses", {"model": "good", "input": [{"type": "y" * 1_000_000}]}),
    ("/api/chat", {"model": "good", "messages": [{"role": "y" * 1_000_000, "content": "hi"}]}),
])
def test_a_huge_value_quoted_in_an_error_is_cut(srv, path, body):
    """Messages quote a client's role or type; a 1 MB one made an answer (and a log line) as long (hostile2)."""
    resp = request(srv.port, post_json(path, body), timeout=30)
    assert resp.status == 400 and len(resp.body) < 3000, resp.body[:300]
    assert b"characters left out" in resp.body


@pytest.mark.parametrize("keep_alive", ["９s", "٣m", "1e3"])
def test_keep_alive_takes_ascii_digits_only(srv, keep_alive):
    resp = request(srv.port, post_json("/v1/chat/completions", {**CHAT, "model": "good", "keep_alive": keep_alive}))
    assert resp.status == 400 and resp.json()["error"]["param"] == "keep_alive"
    ok = request(srv.port, post_json("/v1/chat/completions", {**CHAT, "model": "good", "keep_alive": "9s"}))
    assert ok.status == 200
