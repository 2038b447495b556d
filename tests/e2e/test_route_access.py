"""The API key and the error shape on every route, for every method, from the route table itself.

The routes are read from the App the server builds (app.py's table, the Anthropic routes and
the page's files), so a route added there is checked here the day it is added: without a key
every protected route answers 401 to GET, HEAD, POST, DELETE and a plain OPTIONS, in its own
dialect's error shape; a CORS preflight needs no key; the public paths need none. Requests
that carry the key send malformed JSON, so no handler acts (no model is unloaded, nothing is
stored) and every POST route shows its 400 in its own shape too.
"""

from __future__ import annotations

import pytest

from conftest import ServerProcess
from rawhttp import RawResponse, request

from localserve.app import App
from localserve.errors import ApiError, ErrorShape
from localserve.settings import Settings

KEY = "route-key"
ORIGIN = "http://app.example"
METHODS = ("GET", "HEAD", "POST", "DELETE", "OPTIONS")
TABLE = App(Settings(api_key=[KEY], cors_origin=[ORIGIN]))


def route_paths() -> list[tuple[str, str, ErrorShape, tuple[str, ...]]]:
    """(pattern, a concrete path, its error shape, the methods it serves), one per path pattern."""
    by_pattern: dict[str, tuple[str, str, ErrorShape, tuple[str, ...]]] = {}
    for route in TABLE.router.routes:
        path = route.pattern.replace("{", "").replace("}", "")      # /v1/responses/{response_id} → .../response_id
        _, _, errors, methods = by_pattern.get(route.pattern, (None, path, route.errors, ()))
        by_pattern[route.pattern] = (route.pattern, path, errors, methods + route.methods)
    # the methods every route that matches the path serves (GET /v1/responses/compact is a retrieve)
    return [(pattern, path, errors, tuple(m for route, _ in TABLE.router.match(path) for m in route.methods))
            for pattern, path, errors, _ in by_pattern.values()]


ROUTES = route_paths()
OPEN_ENDED = ("/models/sse",)       # a GET that streams until the server stops: its HEAD shows the head
PROTECTED = [r for r in ROUTES if r[1] not in TABLE.public_paths]
PUBLIC = [r for r in ROUTES if r[1] in TABLE.public_paths]


@pytest.fixture(scope="module")
def guarded(tiny_model):
    srv = ServerProcess(tiny_model, "--api-key", KEY, "--cors-origin", ORIGIN, "--no-store")
    yield srv
    srv.stop()


def send(port: int, method: str, path: str, headers: str = "", body: bytes | None = None) -> RawResponse:
    if body is None and method in ("POST", "DELETE"):
        body = b""
    framing = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if body is not None else ""
    head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\n{framing}{headers}\r\n".encode()
    return request(port, head + (body or b""))


def assert_shape(resp: RawResponse, errors: ErrorShape, status: int, code: str | None = None) -> None:
    """resp is the route's ErrorShape for this status: the status that shape gives, the same
    keys at every level of its body (and the same `type` at the top)."""
    assert resp.status == errors.status(status), (resp.status, resp.body[:200])
    expected = errors.body(ApiError(status, "m", code=code))
    actual = resp.json()
    assert_same_keys(actual, expected)
    assert actual.get("type") == expected.get("type")


def assert_same_keys(actual: dict, expected: dict, where: str = "body") -> None:
    assert set(actual) == set(expected), f"{where}: {sorted(actual)} != {sorted(expected)}"
    for key, value in expected.items():
        if isinstance(value, dict):
            assert isinstance(actual[key], dict), f"{where}.{key} is not an object"
            assert_same_keys(actual[key], value, f"{where}.{key}")


def test_the_table_has_protected_and_public_routes_in_both_shapes():
    # a guard on the reading of the table itself: an empty list would make the tests below vacuous
    assert len(PROTECTED) >= 20 and any(path == "/health" for _, path, _, _ in PUBLIC)
    assert len({id(errors) for _, _, errors, _ in PROTECTED}) >= 2       # OpenAI's and Anthropic's


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("pattern,path,errors,served", PROTECTED, ids=[r[0] for r in PROTECTED])
def test_every_protected_route_needs_the_key_for_every_method(guarded, pattern, path, errors, served, method):
    for headers in ("", "Authorization: Bearer wrong\r\n", "x-api-key: wrong\r\n", f"Authorization: Basic {KEY}\r\n"):
        resp = send(guarded.port, method, path, headers)
        assert resp.status == 401, (method, path, headers, resp.status)
        assert resp.header("www-authenticate") == "Bearer"
        if method != "HEAD":       # HEAD: the same head, no body
            assert_shape(resp, errors, 401, "invalid_api_key")


@pytest.mark.parametrize("pattern,path,errors,served", PROTECTED, ids=[r[0] for r in PROTECTED])
def test_with_the_key_each_method_reaches_the_route(guarded, pattern, path, errors, served):
    for method in METHODS:
        if method == "GET" and pattern in OPEN_ENDED:
            continue
        key = f"Authorization: Bearer {KEY}\r\n" if method != "DELETE" else f"x-api-key: {KEY}\r\n"
        resp = send(guarded.port, method, path, key, body=b"{not json" if method == "POST" else None)
        asked = "GET" if method == "HEAD" else method
        if method == "OPTIONS":
            assert resp.status == 204 and "OPTIONS" in resp.header("allow")
        elif asked not in served:
            assert resp.header("allow") and asked not in resp.header("allow").split(", ")
            if method != "HEAD":
                assert_shape(resp, errors, 405, "method_not_allowed")
            else:
                assert resp.status == 405
        elif method == "POST":              # malformed JSON: refused before the handler acts (a
            assert resp.status in (400, 404)    # route that reads no body looks its id up: 404)
            assert_shape(resp, errors, resp.status)
        else:
            assert resp.status != 401, (method, path)


def test_an_open_ended_stream_needs_the_key_too(guarded):
    for pattern in OPEN_ENDED:
        assert send(guarded.port, "HEAD", pattern).status == 401
        assert send(guarded.port, "HEAD", pattern, f"Authorization: Bearer {KEY}\r\n").status == 200


@pytest.mark.parametrize("pattern,path,errors,served", PROTECTED, ids=[r[0] for r in PROTECTED])
def test_a_preflight_needs_no_key_and_a_plain_options_does(guarded, pattern, path, errors, served):
    preflight = send(guarded.port, "OPTIONS", path,
                     f"Origin: {ORIGIN}\r\nAccess-Control-Request-Method: {served[0]}\r\n")
    assert preflight.status == 204
    assert preflight.header("access-control-allow-origin") == ORIGIN
    assert served[0] in preflight.header("access-control-allow-methods")
    for half_a_preflight in ("", f"Origin: {ORIGIN}\r\n", f"Access-Control-Request-Method: {served[0]}\r\n"):
        plain = send(guarded.port, "OPTIONS", path, half_a_preflight)
        assert plain.status == 401, (path, half_a_preflight)
        assert_shape(plain, errors, 401, "invalid_api_key")


@pytest.mark.parametrize("pattern,path,errors,served", PUBLIC, ids=[r[0] for r in PUBLIC])
def test_public_paths_need_no_key(guarded, pattern, path, errors, served):
    for method in ("GET", "HEAD", "OPTIONS"):
        assert send(guarded.port, method, path).status in (200, 204), (method, path)


def test_unknown_paths_need_the_key_and_answer_in_their_family_shape(guarded):
    for path in ("/v1/nothing", "/v1/messages/nothing", "/nothing"):
        errors = TABLE.router.errors_for(path)
        assert_shape(send(guarded.port, "GET", path), errors, 401, "invalid_api_key")
        found = send(guarded.port, "GET", path, f"x-api-key: {KEY}\r\n")
        assert_shape(found, errors, 404, "not_found")
