"""The cross-site check and the JSON media type rule of wire/access.py, on strings alone."""

from __future__ import annotations

import pytest

from localserve.wire.access import AccessPolicy, is_body_type, is_json_media_type, sent_by_browser


@pytest.mark.parametrize("origin,fetch_site,host", [
    (None, None, "localhost"),                                   # curl, the SDKs, the agent CLIs
    (None, "same-origin", "localhost"),
    (None, "none", "localhost"),                                 # typed into the address bar
    ("http://127.0.0.1:8080", "same-origin", "127.0.0.1:8080"),  # the built-in page
    ("http://LOCALHOST:8080", None, "localhost:8080"),
    ("http://localhost", None, "localhost:80"),                  # the default port, written or not
    ("https://box.lan", None, "box.lan"),
    ("http://app.example", "cross-site", "localhost:8080"),      # on the --cors-origin list
])
def test_may_act(origin, fetch_site, host):
    policy = AccessPolicy(cors_origins=["http://app.example"])
    assert policy.cross_site_refusal(origin, fetch_site, host) is None


@pytest.mark.parametrize("origin,fetch_site,host", [
    ("https://evil.example", "cross-site", "localhost:8080"),
    ("https://evil.example", None, "localhost:8080"),
    ("http://localhost:3000", "same-site", "localhost:8080"),    # another local port: another origin
    ("null", "cross-site", "localhost:8080"),                   # a sandboxed frame, a file:// page
    ("http://localhost:8080", None, None),                      # no Host to be the same origin as
    ("ftp://localhost:8080", None, "localhost:8080"),
    (None, "cross-site", "localhost:8080"),
    (None, " Cross-Site ", "localhost:8080"),
])
def test_refused(origin, fetch_site, host):
    policy = AccessPolicy(cors_origins=["http://app.example"])
    assert "refused" in policy.cross_site_refusal(origin, fetch_site, host)


def test_a_wildcard_allowlist_lets_any_origin_act():
    assert AccessPolicy(cors_origins=["*"]).cross_site_refusal("https://evil.example", "cross-site", "x") is None


def test_a_huge_origin_is_cut_in_the_message():
    refusal = AccessPolicy().cross_site_refusal("http://" + "a" * 100_000, None, "localhost")
    assert len(refusal) < 500


@pytest.mark.parametrize("value,ok", [
    ("application/json", True), ("application/json; charset=utf-8", True), (" Application/JSON ", True),
    ("application/vnd.api+json", True), ("application/merge-patch+json;charset=UTF-8", True),
    ("text/plain", False), ("text/plain;charset=UTF-8", False), ("application/x-www-form-urlencoded", False),
    ("multipart/form-data; boundary=x", False), ("application/jsonx", False), ("text/json", False),
    ("", False), (None, False), ("+json", False),
])
def test_json_media_types(value, ok):
    assert is_json_media_type(value) is ok


@pytest.mark.parametrize("origin,fetch_site,browser", [
    (None, None, False),                        # curl, LiteLLM, the SDKs: their body's type is not checked
    ("http://localhost:8080", None, True), (None, "same-origin", True), (None, "none", True),
    ("null", "cross-site", True), ("", None, True),
])
def test_who_is_a_browser(origin, fetch_site, browser):
    assert sent_by_browser(origin, fetch_site) is browser


@pytest.mark.parametrize("value,expected,ok", [
    ("multipart/form-data; boundary=x", "multipart/form-data", True),
    (" Multipart/Form-Data;boundary=----WebKitFormBoundary", "multipart/form-data", True),
    ("application/json", "multipart/form-data", False), ("text/plain", "multipart/form-data", False),
    ("multipart/mixed; boundary=x", "multipart/form-data", False), (None, "multipart/form-data", False),
    ("application/vnd.api+json", "application/json", True), ("multipart/form-data", "application/json", False),
])
def test_a_body_is_held_to_its_routes_media_type(value, expected, ok):
    assert is_body_type(value, expected) is ok


def test_the_transcription_routes_take_a_form_and_the_rest_json():
    from localserve.app import App
    from localserve.settings import Settings
    router = App(Settings()).router
    assert router.body_type_of("/v1/audio/transcriptions") == router.body_type_of("/v1/audio/translations") \
        == "multipart/form-data"
    assert {route.body_type for route in router.routes} == {"application/json", "multipart/form-data"}
    assert router.body_type_of("/v1/chat/completions") == router.body_type_of("/nowhere") == "application/json"
