"""No web page on another site can make the daemon act (issue 28, item 1).

A page can send `fetch(url, {mode: "no-cors", method: "POST", body})` with no preflight: it
goes out as text/plain (or form data) with the page's Origin and `Sec-Fetch-Site: cross-site`.
The page cannot read the answer, so what matters is whether anything happened: these tests
send exactly those headers as raw requests and then look at the daemon's state. The last test
does it from a real headless Chromium on a page served from a second local port.

A transcription's body is a multipart form, which a simple request can send: the server's own
page may post one (its Origin is ours), another site's page may not (403 before the form is read).
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
from functools import partial

import pytest

from conftest import ROOT, ServerProcess
from rawhttp import post_json, request
from tinyaudio import tone, wav_bytes
from wiretap import SHUTDOWN_POLL

EVIL = "https://evil.example"
BROWSER_HEADERS = f"Origin: {EVIL}\r\nSec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: no-cors\r\n"
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}


@pytest.fixture(scope="module")
def srv(tiny_model, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("cross-site-data")
    server = ServerProcess(tiny_model, "--model-id", "tiny", "--data-dir", str(data_dir),
                           "--cors-origin", "http://app.example")
    yield server
    server.stop()


def post(port: int, path: str, body: bytes, content_type: str | None, headers: str = "", host: str = "localhost"):
    type_line = f"Content-Type: {content_type}\r\n" if content_type else ""
    return request(port, (f"POST {path} HTTP/1.1\r\nHost: {host}\r\n{type_line}Content-Length: {len(body)}\r\n"
                          f"{headers}\r\n").encode() + body)


def get(port: int, path: str, headers: str = ""):
    return request(port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode())


def state_of(port: int) -> str:
    return get(port, "/v1/models/tiny").json()["state"]


def responses_created(srv) -> int:
    """POST /v1/responses the server answered with a 2xx (the access log's lines)."""
    return sum(1 for line in srv.lines if "POST /v1/responses 2" in line)


# ---- a foreign page's simple request: refused, nothing done ---------------------------------

def test_foreign_page_cannot_unload_the_model(srv):
    assert state_of(srv.port) == "loaded"
    resp = post(srv.port, "/models/unload", b'{"model": "tiny"}', "text/plain;charset=UTF-8", BROWSER_HEADERS)
    assert resp.status == 403 and resp.json()["error"]["code"] == "cross_site_request"
    assert EVIL in resp.json()["error"]["message"]
    assert state_of(srv.port) == "loaded"


def test_foreign_page_cannot_store_a_background_response(srv):
    body = json.dumps({"model": "tiny", "input": "hi", "background": True, "max_output_tokens": 2}).encode()
    resp = post(srv.port, "/v1/responses", body, "text/plain", BROWSER_HEADERS)
    assert resp.status == 403 and resp.json()["error"]["code"] == "cross_site_request"
    assert b'"resp_' not in resp.body and responses_created(srv) == 0


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
def test_a_foreign_origin_is_refused_whatever_the_body_type(srv, content_type):
    resp = post(srv.port, "/v1/chat/completions", json.dumps(CHAT).encode(), content_type, f"Origin: {EVIL}\r\n")
    assert resp.status == 403 and resp.json()["error"]["type"] == "permission_error"


def test_cross_site_without_origin_is_refused_even_for_a_get(srv):
    resp = get(srv.port, "/v1/models", "Sec-Fetch-Site: cross-site\r\n")
    assert resp.status == 403 and resp.json()["error"]["code"] == "cross_site_request"
    assert get(srv.port, "/v1/models", "Sec-Fetch-Site: same-origin\r\n").status == 200


def test_anthropic_routes_refuse_in_anthropic_shape(srv):
    body = json.dumps({"model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}).encode()
    refused = post(srv.port, "/v1/messages", body, "text/plain", BROWSER_HEADERS)
    assert refused.status == 403
    assert refused.json()["type"] == "error" and refused.json()["error"]["type"] == "permission_error"
    wrong_type = post(srv.port, "/v1/messages/count_tokens", body, "text/plain", **own_page(srv))
    assert wrong_type.status == 415 and wrong_type.json()["error"]["type"] == "invalid_request_error"


def test_the_page_files_and_health_are_served_to_any_site(srv):
    for path in ("/", "/health"):
        assert get(srv.port, path, BROWSER_HEADERS).status == 200


def test_a_preflight_from_a_foreign_origin_gets_no_cors_grant(srv):
    resp = request(srv.port, f"OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nOrigin: {EVIL}\r\n"
                             f"Access-Control-Request-Method: POST\r\n\r\n".encode())
    assert resp.status == 204 and resp.header("access-control-allow-origin") is None


# ---- JSON bodies: a browser's must say so; other clients' are read whatever they say ------------

def own_page(srv) -> dict:
    """The headers of a request from this server's own page (same origin: it may act)."""
    return {"headers": f"Origin: http://localhost:{srv.port}\r\nSec-Fetch-Site: same-origin\r\n",
            "host": f"localhost:{srv.port}"}


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None, "application/jsonx"])
def test_a_browsers_body_not_declared_json_is_415(srv, content_type):
    """Even from our own origin: the page sends JSON typed, and a browser's untyped body is a
    simple request no preflight vetted."""
    resp = post(srv.port, "/models/unload", b'{"model": "tiny"}', content_type, **own_page(srv))
    assert resp.status == 415 and resp.json()["error"]["code"] == "unsupported_media_type"
    fetch_site_only = post(srv.port, "/models/unload", b'{"model": "tiny"}', content_type,
                           "Sec-Fetch-Site: same-origin\r\n")
    assert fetch_site_only.status == 415
    assert state_of(srv.port) == "loaded"


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "application/octet-stream",
                                          "text/plain", None])
def test_a_non_browser_clients_body_is_json_whatever_its_type(srv, content_type):
    """LiteLLM's Ollama providers send no type (octet-stream when streaming async); `curl -d`
    sends a form type: Ollama and llama-server read the body as JSON anyway."""
    resp = post(srv.port, "/v1/chat/completions", json.dumps(CHAT).encode(), content_type,
                "User-Agent: curl/8.5.0\r\nAccept: */*\r\n")
    assert resp.status == 200, resp.body
    assert resp.json()["object"] == "chat.completion"
    not_json = post(srv.port, "/v1/chat/completions", b"model=tiny&prompt=hi", content_type)
    assert not_json.status == 400 and "not valid JSON" in not_json.json()["error"]["message"]


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/vnd.api+json"])
def test_json_content_types_are_read(srv, content_type):
    resp = post(srv.port, "/v1/chat/completions", json.dumps(CHAT).encode(), content_type)
    assert resp.status == 200, resp.body
    from_page = post(srv.port, "/v1/chat/completions", json.dumps(CHAT).encode(), content_type, **own_page(srv))
    assert from_page.status == 200, from_page.body


# ---- a transcription's multipart form -----------------------------------------------------------

CLIP = wav_bytes(tone(0.2))
FORM_TYPE = "multipart/form-data; boundary=page"
FORM = (b'--page\r\nContent-Disposition: form-data; name="model"\r\n\r\ntiny\r\n'
        b'--page\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\nContent-Type: audio/wav\r\n\r\n'
        + CLIP + b"\r\n--page--\r\n")


def test_the_own_page_may_post_a_transcription_form_and_another_site_may_not(srv):
    """The form reaches the handler from our own page: this model has no audio encoder, so the
    answer is the handler's 400 naming the file (not the gate's 415 or 403)."""
    own = post(srv.port, "/v1/audio/transcriptions", FORM, FORM_TYPE, **own_page(srv))
    assert own.status == 400 and own.json()["error"]["code"] == "model_has_no_audio", own.body
    allowed = post(srv.port, "/v1/audio/transcriptions", FORM, FORM_TYPE, "Origin: http://app.example\r\n")
    assert allowed.status == 400 and allowed.json()["error"]["code"] == "model_has_no_audio"
    for headers in (BROWSER_HEADERS, "Sec-Fetch-Site: cross-site\r\n", "Origin: null\r\n",
                    f"Origin: http://localhost:{srv.port + 1}\r\nSec-Fetch-Site: same-site\r\n"):
        foreign = post(srv.port, "/v1/audio/transcriptions", FORM, FORM_TYPE, headers)
        assert foreign.status == 403 and foreign.json()["error"]["code"] == "cross_site_request", headers


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "application/json", None])
def test_a_browsers_transcription_body_must_be_a_form(srv, content_type):
    resp = post(srv.port, "/v1/audio/transcriptions", FORM, content_type, **own_page(srv))
    assert resp.status == 415 and "multipart/form-data" in resp.json()["error"]["message"]
    # other clients are not held to it: the route's own parser answers (a 400 naming the type)
    sdk = post(srv.port, "/v1/audio/transcriptions", FORM, content_type)
    assert sdk.status == 400 and "multipart/form-data" in sdk.json()["error"]["message"]


# ---- who may still act ------------------------------------------------------------------------

def test_the_servers_own_origin_and_allowed_origins_may_act(srv):
    own = post(srv.port, "/v1/chat/completions", json.dumps(CHAT).encode(), "application/json",
               f"Origin: http://127.0.0.1:{srv.port}\r\nSec-Fetch-Site: same-origin\r\n", host=f"127.0.0.1:{srv.port}")
    assert own.status == 200
    by_name = post(srv.port, "/v1/chat/completions", json.dumps(CHAT).encode(), "application/json",
                   f"Origin: http://localhost:{srv.port}\r\n", host=f"localhost:{srv.port}")
    assert by_name.status == 200
    other_port = post(srv.port, "/v1/chat/completions", json.dumps(CHAT).encode(), "application/json",
                      f"Origin: http://localhost:{srv.port + 1}\r\n", host=f"localhost:{srv.port}")
    assert other_port.status == 403                 # another local port is another origin
    allowed = post(srv.port, "/v1/chat/completions", json.dumps(CHAT).encode(), "application/json",
                   "Origin: http://app.example\r\nSec-Fetch-Site: cross-site\r\n")
    assert allowed.status == 200 and allowed.header("access-control-allow-origin") == "http://app.example"


def test_sdk_and_curl_requests_are_unchanged(srv):
    """What the SDKs, curl and the agent CLIs send: JSON, no Origin, no Sec-Fetch-*."""
    assert request(srv.port, post_json("/v1/chat/completions", CHAT)).status == 200
    curl = post(srv.port, "/tokenize", b'{"model": "tiny", "content": "hi"}', "application/json",
                "User-Agent: curl/8.5.0\r\nAccept: */*\r\n")
    assert curl.status == 200
    bodiless = request(srv.port, b"POST /v1/responses/resp_nope/cancel HTTP/1.1\r\nHost: localhost\r\n"
                                 b"Content-Length: 0\r\n\r\n")
    assert bodiless.status == 404                   # no body, no type needed


# ---- a real browser ---------------------------------------------------------------------------

ATTACK_PAGE = """<!doctype html><title>a page on another site</title><script>
const target = "http://127.0.0.1:%(port)d";
const body = JSON.stringify({model: "tiny"});
function form() {
  const data = new FormData();
  data.append("model", "tiny");
  data.append("file", new Blob([new Uint8Array([82, 73, 70, 70])], {type: "audio/wav"}), "a.wav");
  return data;
}
window.attempts = Promise.allSettled([
  fetch(target + "/models/unload", {method: "POST", mode: "no-cors", body}),
  fetch(target + "/models/unload", {method: "POST", mode: "no-cors", body,
                                    headers: {"Content-Type": "application/x-www-form-urlencoded"}}),
  fetch(target + "/v1/responses", {method: "POST", mode: "no-cors",
        body: JSON.stringify({model: "tiny", input: "hi", background: true, max_output_tokens: 2})}),
  fetch(target + "/v1/audio/transcriptions", {method: "POST", mode: "no-cors", body: form()}),
]).then(results => { window.done = results.map(r => r.status); });
</script>"""


@pytest.fixture(scope="module")
def browser(chromium):
    yield chromium.lend(ROOT / "test-output" / "webui")
    chromium.park()


def test_a_no_cors_fetch_from_another_local_port_changes_nothing(srv, browser, tmp_path):
    (tmp_path / "index.html").write_text(ATTACK_PAGE % {"port": srv.port})
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    site = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=site.serve_forever, args=(SHUTDOWN_POLL,), daemon=True).start()
    refused_before = srv.log.count(" 403 ")
    try:
        browser.driver.get(f"http://127.0.0.1:{site.server_address[1]}/index.html")
        deadline = time.monotonic() + 20
        while browser.driver.execute_script("return window.done") is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert browser.driver.execute_script("return window.done") == ["fulfilled"] * 4
    finally:
        site.shutdown()
        site.server_close()
    assert state_of(srv.port) == "loaded"
    # the four requests reached the daemon and were refused: the test is not passing for want of them
    deadline = time.monotonic() + 5
    while srv.log.count(" 403 ") < refused_before + 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert srv.log.count(" 403 ") == refused_before + 4
    assert responses_created(srv) == 0


def test_the_servers_own_page_posts_a_transcription_form_from_a_real_browser(srv, browser):
    """Chromium's own FormData POST (its Origin, Sec-Fetch-Site and boundary) from the built-in
    page reaches the handler: the tiny model has no audio encoder, so its 400 names the file."""
    browser.driver.get(f"http://127.0.0.1:{srv.port}/")
    answer = browser.driver.execute_async_script("""
        const [clip, done] = arguments;
        const data = new FormData();
        data.append("model", "tiny");
        data.append("file", new Blob([Uint8Array.from(atob(clip), c => c.charCodeAt(0))], {type: "audio/wav"}),
                    "clip.wav");
        fetch("/v1/audio/transcriptions", {method: "POST", body: data})
          .then(r => r.json().then(body => done([r.status, body])), e => done([0, String(e)]));
    """, base64.b64encode(CLIP).decode())
    assert answer[0] == 400 and answer[1]["error"]["code"] == "model_has_no_audio", answer
