"""keep_alive on every route that takes it: -1 (any negative) keeps a model for good, 0 unloads it,
and nothing past Ollama's longest duration (MAX_DURATION_SECONDS, about 292 years) is taken, so
/api/ps always has a date to show (issue 44 item 7, issue 46 item 1).

A keep_alive of 1e18 was taken on /api/generate and /v1/chat/completions; /api/ps then failed
with a 500 for every client until the model unloaded, which was never."""

from __future__ import annotations

import shutil

import pytest

from clients import ollama_client
from conftest import ServerProcess
from rawhttp import post_json, request

from localserve.dialects.ollama.clock import FOREVER
from localserve.models.units import MAX_DURATION_SECONDS

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("keep-alive")
    shutil.copy(tiny_model, folder / "tiny.gguf")
    srv = ServerProcess(None, "--models-dir", str(folder), "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def post(server, path: str, body: dict):
    return request(server.port, post_json(path, body), timeout=60)


def running(server) -> dict[str, dict]:
    resp = request(server.port, b"GET /api/ps HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert resp.status == 200, resp.body
    return {m["model"]: m for m in resp.json()["models"]}


def unload(server) -> None:
    assert post(server, "/api/generate", {"model": "tiny", "keep_alive": 0}).json()["done_reason"] == "unload"
    assert "tiny:latest" not in running(server)


@pytest.mark.parametrize("forever", [-1, "-1m", -0.5, -1e308])
@pytest.mark.parametrize("route", ["chat", "generate"])
def test_a_negative_keep_alive_on_an_empty_request_loads_the_model_for_good(server, route, forever):
    """Ollama's way to preload a model and keep it: never an unload, whatever the negative value."""
    client = ollama_client(server)
    unload(server)
    if route == "chat":
        reply = client.chat(model="tiny", messages=[], keep_alive=forever)
    else:
        reply = client.generate(model="tiny", prompt="", keep_alive=forever)
    assert reply.done and reply.done_reason == "load"
    assert running(server)["tiny:latest"]["expires_at"] == FOREVER


def test_zero_still_unloads_and_a_later_request_keeps_its_own_time(server):
    client = ollama_client(server)
    client.generate(model="tiny", prompt="", keep_alive=-1)
    assert client.chat(model="tiny", messages=[], keep_alive="0s").done_reason == "unload"
    assert "tiny:latest" not in running(server)
    client.generate(model="tiny", prompt="", keep_alive="1h")
    expires = running(server)["tiny:latest"]["expires_at"]
    assert expires != FOREVER and expires.startswith("20")


# Past Ollama's longest duration, as a number, a duration string, or no number at all.
TOO_LONG = [1e18, 1e308, 1e19, "99999999999h", "2562048h", "1e18", "NaN", "Infinity", "inf",
            MAX_DURATION_SECONDS * 2]
ROUTES = [("/api/generate", {"prompt": "hi", "options": {"num_predict": 1}}),
          ("/api/generate", {}),
          ("/api/chat", {"messages": USER, "options": {"num_predict": 1}}),
          ("/api/chat", {"messages": []}),
          ("/v1/chat/completions", {"messages": USER, "max_tokens": 1}),
          ("/v1/completions", {"prompt": "hi", "max_tokens": 1}),
          ("/v1/messages", {"messages": USER, "max_tokens": 1}),
          ("/v1/responses", {"input": "hi", "max_output_tokens": 16})]


@pytest.mark.parametrize("path, body", ROUTES, ids=[f"{p}{'-empty' if not b or b.get('messages') == [] else ''}"
                                                     for p, b in ROUTES])
def test_a_keep_alive_past_the_longest_duration_is_a_400_on_every_route(server, path, body):
    for value in TOO_LONG:
        resp = post(server, path, {"model": "tiny", **body, "keep_alive": value})
        assert resp.status == 400, (value, resp.body)
        assert b"keep_alive" in resp.body, resp.body
        running(server)         # /api/ps answers all along


def test_the_longest_duration_is_taken_and_has_a_date(server):
    client = ollama_client(server)
    for longest in ("2562047h", MAX_DURATION_SECONDS):
        unload(server)
        assert client.generate(model="tiny", prompt="", keep_alive=longest).done_reason == "load"
        expires = running(server)["tiny:latest"]["expires_at"]
        assert expires.startswith("23") and expires != FOREVER          # some 292 years from now
    resp = post(server, "/v1/chat/completions", {"model": "tiny", "messages": USER, "max_tokens": 1,
                                                 "keep_alive": "2562047h"})
    assert resp.status == 200, resp.body
    assert running(server)["tiny:latest"]["expires_at"].startswith("23")
