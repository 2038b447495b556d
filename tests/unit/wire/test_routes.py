"""wire/routes.py: routing on the path as sent, a route's parameters decoded once matched.

A socket pair stands for the client: the router writes the real response bytes into it.
"""

from __future__ import annotations

import json
import socket

import pytest

from localserve.wire.http import RequestReader
from localserve.wire.response_writer import ResponseWriter
from localserve.wire.routes import Router


class _Gate:
    def check_access(self, exchange) -> None:
        pass

    def preflight_headers(self, exchange, allow: str) -> list[tuple[str, str]]:
        return []


def _router(seen: list[dict]) -> Router:
    router = Router(_Gate())

    def handler(exchange) -> None:
        seen.append(dict(exchange.params))
        exchange.send_json({"ok": True})

    router.add("/v1/chat/completions", "POST", handler)
    router.add("/v1/models/{model}", "GET", handler)
    router.add("/v1/conversations/{conversation_id}/items/{item_id}", "GET", handler)
    return router


def _serve(target: str, method: str = "GET") -> tuple[int, dict, list[dict]]:
    reader = RequestReader()
    reader.feed(f"{method} {target} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2\r\n\r\n{{}}".encode())
    request = reader.next_request()
    seen: list[dict] = []
    ours, theirs = socket.socketpair()
    with ours, theirs:
        _router(seen).dispatch(request, ResponseWriter(ours, request))
        theirs.settimeout(2)
        head, _, body = theirs.recv(65536).partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body), seen


@pytest.mark.parametrize("target", ["/v1%2Fchat%2Fcompletions", "/v1/chat%2Fcompletions",
                                    "/v1/chat/completions%2F", "/v1/%63hat/completions"])
def test_an_escaped_path_is_no_route(target):
    status, body, seen = _serve(target, "POST")
    assert status == 404 and body["error"]["code"] == "not_found" and not seen


def test_the_route_as_sent_is_served():
    assert _serve("/v1/chat/completions", "POST")[::2] == (200, [{}])


@pytest.mark.parametrize("target, model", [
    ("/v1/models/library%2Fllama3%3A8b", "library/llama3:8b"),
    ("/v1/models/hf.co%2Forg%2Frepo%3AQ4_K_M", "hf.co/org/repo:Q4_K_M"),
    ("/v1/models/caf%C3%A9", "caf\u00e9"),
    ("/v1/models/a%252Fb", "a%2Fb"),         # decoded once: an escaped % stays a %
    ("/v1/models/plain", "plain"),
])
def test_a_parameter_is_one_segment_decoded_once(target, model):
    assert _serve(target)[::2] == (200, [{"model": model}])


def test_each_parameter_is_decoded_on_its_own():
    status, _, seen = _serve("/v1/conversations/c%2F1/items/i%2F2")
    assert (status, seen) == (200, [{"conversation_id": "c/1", "item_id": "i/2"}])


def test_an_unescaped_slash_is_no_parameter():
    assert _serve("/v1/models/library/llama3")[:1] == (404,)


@pytest.mark.parametrize("target", ["/v1/models/%FF", "/v1/models/%C3"])
def test_a_parameter_that_is_no_utf_8_is_400(target):
    status, body, seen = _serve(target)
    assert status == 400 and body["error"]["code"] == "invalid_path" and not seen
