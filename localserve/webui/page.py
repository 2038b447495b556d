"""Serve the built-in page: its files, read once at start, with the headers a browser needs.

The page is plain HTML, CSS and JavaScript with no build step and nothing fetched from
elsewhere, so it works on a machine with no network. Its files are public (no API key
needed: they hold no secret, and the page asks for the key itself); the API calls it
makes carry the key. Every file is sent with a strong ETag (a client revalidates with
If-None-Match and gets a 304) and a Content-Security-Policy that allows only scripts,
styles and requests of our own origin: no inline script, no eval, no frames.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import partial
from importlib import resources

from ..dialects.exchange import Exchange, RouteTable

# path → (file in this package, Content-Type)
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/webui/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/webui/dom.js": ("dom.js", "text/javascript; charset=utf-8"),
    "/webui/api.js": ("api.js", "text/javascript; charset=utf-8"),
    "/webui/messages.js": ("messages.js", "text/javascript; charset=utf-8"),
    "/webui/chat.js": ("chat.js", "text/javascript; charset=utf-8"),
    "/webui/status.js": ("status.js", "text/javascript; charset=utf-8"),
    "/webui/style.css": ("style.css", "text/css; charset=utf-8"),
    "/webui/favicon.svg": ("favicon.svg", "image/svg+xml"),
}
CONTENT_SECURITY_POLICY = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; "
                           "frame-ancestors 'none'")
# Revalidate every time: a 304 costs one round trip, and an upgraded daemon's page shows at once.
CACHE_CONTROL = "no-cache"


@dataclass(frozen=True)
class Asset:
    body: bytes
    content_type: str
    etag: str

    def headers(self) -> list[tuple[str, str]]:
        return [("ETag", self.etag), ("Cache-Control", CACHE_CONTROL),
                ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
                ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
                ("X-Frame-Options", "DENY")]


def load_assets() -> dict[str, Asset]:
    package = resources.files(__package__)
    assets = {}
    for path, (name, content_type) in FILES.items():
        body = package.joinpath(name).read_bytes()
        assets[path] = Asset(body, content_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')
    return assets


def register(routes: RouteTable) -> tuple[str, ...]:
    """Add the page's routes; returns their paths, which need no API key."""
    for path, asset in load_assets().items():
        routes.add(path, "GET", partial(send_asset, asset))
    return tuple(FILES)


def page_handler(path: str = "/"):
    """The handler of one of the page's files (a route that answers more than the page at its path)."""
    return partial(send_asset, load_assets()[path])


def send_asset(asset: Asset, exchange: Exchange) -> None:
    if etag_matches(exchange.request.header("if-none-match"), asset.etag):
        exchange.writer.send(304, b"", content_type=None, headers=asset.headers())
        return
    exchange.writer.send(200, asset.body, content_type=asset.content_type, headers=asset.headers())


def etag_matches(if_none_match: str | None, etag: str) -> bool:
    """If-None-Match's weak comparison (RFC 9110 §13.1.2): "*", or any listed tag, W/ or not."""
    if not if_none_match:
        return False
    for tag in if_none_match.split(","):
        tag = tag.strip()
        if tag == "*" or tag.removeprefix("W/") == etag:
            return True
    return False
