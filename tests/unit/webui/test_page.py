"""The page's files as page.py loads them, and If-None-Match's comparison, with no server."""

from __future__ import annotations

import re
from importlib import resources

from localserve.webui.page import CONTENT_SECURITY_POLICY, FILES, etag_matches, load_assets


def test_every_file_is_loaded_with_its_type_and_a_tag_of_its_bytes():
    assets = load_assets()
    assert set(assets) == set(FILES)
    tags = {asset.etag for asset in assets.values()}
    assert len(tags) == len(assets)                       # a tag per content
    for path, asset in assets.items():
        assert asset.body and asset.content_type == FILES[path][1]
        assert re.fullmatch(r'"[0-9a-f]{32}"', asset.etag)
        assert ("Content-Security-Policy", CONTENT_SECURITY_POLICY) in asset.headers()


def test_every_module_the_page_imports_is_served():
    """A module app.js imports but FILES lacks would be a 404 and a page that never starts."""
    served = {name for name, _ in FILES.values()}
    package = resources.files("localserve.webui")
    for name in served:
        if name.endswith(".js"):
            for imported in re.findall(r'from "\./([\w.]+)"', package.joinpath(name).read_text()):
                assert imported in served, f"{name} imports {imported}, which is not served"
    assert re.search(r'<script type="module" src="/webui/app.js">', package.joinpath("index.html").read_text())


def test_if_none_match_compares_weakly():
    tag = '"abc"'
    assert etag_matches('"abc"', tag)
    assert etag_matches('W/"abc"', tag)
    assert etag_matches('"x", W/"y" , "abc"', tag)
    assert etag_matches("*", tag)
    assert not etag_matches('"abcd"', tag)
    assert not etag_matches("", tag)
    assert not etag_matches(None, tag)
