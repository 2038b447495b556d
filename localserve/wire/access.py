"""Who may talk to the daemon: API keys, the Host check against DNS rebinding, CORS, and
the cross-site check.

A localhost daemon is reachable from any web page the user opens. Three browser
attacks matter: a page on another origin reading responses (stopped by CORS being
off unless --cors-origin allows that origin); a page on another origin making us
act without reading the answer (a "simple" request: `fetch(url, {mode: "no-cors",
method: "POST"})` goes out as text/plain with no preflight, so CORS never runs);
and DNS rebinding, where an attacker's domain is re-pointed at 127.0.0.1 so the
page becomes same-origin with us. Rebinding always arrives with the attacker's
domain name in Host, so only loopback names, IP literals and --allowed-host names
are served. A cross-site request always arrives with the page's Origin (browsers
send it on every non-GET request) or `Sec-Fetch-Site: cross-site`, so a request
that acts is refused when either names a site that is neither ours nor allowed;
and a browser's JSON body must say so in Content-Type, which no simple request
can, so a browser has to ask first with a preflight, which the allowlist then
decides. A form route's body (a transcription's multipart/form-data) is one a simple
request can send: there the cross-site check is the whole defence, and a page of this
server's own origin (or a --cors-origin one) may post its form. SDKs, curl and agent CLIs send no Origin and no Sec-Fetch-Site: their
bodies are read as JSON whatever their Content-Type says (LiteLLM sends none,
`curl -d` a form type), as Ollama and llama-server read them.

Several API keys are several users: each key's request gets a scope of its own (a digest of
the key, never the key), so its prompts are cached, and its responses stored, where no other
key's requests can find them (a cached prefix shows in `cached_tokens`, which would let one
key guess another's prompt a token at a time). One key or none is one user: one scope.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import socket
from dataclasses import dataclass, field

from ..dialects.exchange import Scope
from .http_head import is_host

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
CORS_ALLOW_HEADERS = "authorization, content-type, x-api-key, anthropic-version, anthropic-beta, openai-beta, " \
                     "x-stainless-lang, x-stainless-package-version, x-stainless-os, x-stainless-arch, " \
                     "x-stainless-runtime, x-stainless-runtime-version, x-stainless-retry-count, " \
                     "x-stainless-timeout, x-stainless-helper-method, anthropic-dangerous-direct-browser-access"
CORS_MAX_AGE = "600"
DEFAULT_PORTS = {"http": "80", "https": "443"}
SHOWN_ORIGIN_CHARS = 200     # an Origin named in an error, cut: the header may be kilobytes
SCOPE_HEX_DIGITS = 16        # a key's scope id: 64 bits of its digest, stored with its responses


def load_api_keys(keys: list[str], key_file: str | None) -> list[str]:
    """Keys from flags plus one per line of the key file (blank lines and # comments skipped)."""
    found = [k for k in keys if k]
    if key_file:
        with open(key_file, encoding="utf-8") as handle:
            for line in handle:
                line = line.strip()
                if line and not line.startswith("#"):
                    found.append(line)
    return found


@dataclass
class AccessPolicy:
    api_keys: list[str] = field(default_factory=list)
    allowed_hosts: list[str] = field(default_factory=list)
    cors_origins: list[str] = field(default_factory=list)
    shared_cache: bool = False      # --shared-cache: every key's requests share the prompt caches

    def __post_init__(self) -> None:
        self._keys = [k.encode() for k in self.api_keys]
        self._scopes = [scope_id(k) for k in self._keys] if len(set(self._keys)) > 1 else [""] * len(self._keys)
        self._own_names = {socket.gethostname().lower()}

    # ---- API keys ------------------------------------------------------------------

    @property
    def requires_key(self) -> bool:
        return bool(self._keys)

    def key_ok(self, authorization: str | None, x_api_key: str | None) -> bool:
        return self.key_scope(authorization, x_api_key) is not None

    def key_scope(self, authorization: str | None, x_api_key: str | None) -> Scope | None:
        """The scope of the key presented; None when it is none of ours."""
        presented = x_api_key
        if authorization and authorization[:7].lower() == "bearer ":
            presented = authorization[7:].strip()
        if not presented:
            return None
        candidate = presented.encode()
        # compare with every key, always: the time taken says nothing about which matched
        matched = None
        for key, scope in zip(self._keys, self._scopes):
            if hmac.compare_digest(candidate, key):
                matched = scope
        if matched is None:
            return None
        return Scope(owner=matched, cache="" if self.shared_cache else matched)

    # ---- Host ----------------------------------------------------------------------

    def host_ok(self, host_header: str | None) -> bool:
        if host_header is None:
            return True                 # HTTP/1.0 without Host: not a browser
        # The head's grammar already refuses userinfo and junk; checked again here so this
        # decision never rests on what another module let through.
        if not is_host(host_header.strip()):
            return False
        host = _strip_port(host_header.strip().lower()).rstrip(".")
        if not host:
            return False
        if _is_ip(host) or host in LOOPBACK_NAMES or host.endswith(".localhost") or host in self._own_names:
            return True
        for allowed in self.allowed_hosts:
            allowed = allowed.lower()
            if allowed == "*" or host == allowed or (allowed.startswith(".") and host.endswith(allowed)):
                return True
        return False

    # ---- CORS ----------------------------------------------------------------------

    def origin_ok(self, origin: str | None) -> bool:
        return bool(origin) and ("*" in self.cors_origins or origin in self.cors_origins)

    # ---- cross-site requests -----------------------------------------------------------

    def cross_site_refusal(self, origin: str | None, fetch_site: str | None, host: str | None) -> str | None:
        """Why a request that acts is refused as coming from another site's page; None when it may act.
        An Origin is fine when it is our own (the built-in page) or --cors-origin allows it; with no
        Origin, `Sec-Fetch-Site: cross-site` still says a browser sent it for another site."""
        if origin is not None:
            if _same_origin(origin, host) or self.origin_ok(origin):
                return None
            shown = origin if len(origin) <= SHOWN_ORIGIN_CHARS else origin[:SHOWN_ORIGIN_CHARS] + "..."
            return (f"requests from a web page at origin '{shown}' are refused: only this server's own "
                    f"origin and --cors-origin origins may use it")
        if (fetch_site or "").strip().lower() == "cross-site":
            return ("requests a browser sends for another site (Sec-Fetch-Site: cross-site) are refused: "
                    "only this server's own origin and --cors-origin origins may use it")
        return None

    def cors_headers(self, origin: str | None) -> list[tuple[str, str]]:
        if not self.origin_ok(origin):
            return []
        return [("Access-Control-Allow-Origin", origin), ("Vary", "Origin"),
                ("Access-Control-Expose-Headers", "request-id, x-request-id, retry-after")]

    def preflight_headers(self, origin: str | None, methods: str, requested_headers: str | None) -> list[tuple[str, str]]:
        if not self.origin_ok(origin):
            return []
        return [("Access-Control-Allow-Methods", methods),
                ("Access-Control-Allow-Headers", requested_headers or CORS_ALLOW_HEADERS),
                ("Access-Control-Max-Age", CORS_MAX_AGE)]


def sent_by_browser(origin: str | None, fetch_site: str | None) -> bool:
    """Browsers send Origin on every request that is not a GET or HEAD, and current ones
    Sec-Fetch-Site on every request; SDKs, curl and agent CLIs send neither."""
    return origin is not None or fetch_site is not None


def scope_id(key: bytes) -> str:
    """A key's scope: a digest that names it in the store and the caches without holding it."""
    return hashlib.sha256(b"localserve key scope\0" + key).hexdigest()[:SCOPE_HEX_DIGITS]


def is_body_type(content_type: str | None, expected: str) -> bool:
    """Whether a body's Content-Type is the media type its route takes (application/*+json
    counts as JSON), parameters (charset, boundary) allowed."""
    if expected == "application/json":
        return is_json_media_type(content_type)
    return (content_type or "").split(";", 1)[0].strip().lower() == expected


def is_json_media_type(content_type: str | None) -> bool:
    """application/json or application/*+json, parameters (charset) allowed."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _same_origin(origin: str, host: str | None) -> bool:
    """Whether a serialised origin (scheme://host[:port]) names the Host this request came to."""
    scheme, sep, authority = origin.strip().lower().partition("://")
    if not sep or scheme not in DEFAULT_PORTS or host is None:
        return False
    return _with_port(authority, scheme) == _with_port(host.strip().lower(), scheme)


def _with_port(authority: str, scheme: str) -> str:
    """host:port with the scheme's default port written out, so 'localhost' == 'localhost:80'."""
    has_port = authority.rsplit("]", 1)[-1].count(":") == 1 if authority.startswith("[") \
        else authority.count(":") == 1
    return authority if has_port else f"{authority}:{DEFAULT_PORTS[scheme]}"


def _strip_port(host: str) -> str:
    if host.startswith("["):
        end = host.find("]")
        return host[1:end] if end != -1 else host
    if host.count(":") == 1:
        return host.split(":", 1)[0]
    return host


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
