"""Who may talk to the daemon: API keys, the Host check against DNS rebinding, CORS.

A localhost daemon is reachable from any web page the user opens. Two browser
attacks matter: a page on another origin reading responses (stopped by CORS being
off unless --cors-origin allows that origin), and DNS rebinding, where an
attacker's domain is re-pointed at 127.0.0.1 so the page becomes same-origin
with us. Rebinding always arrives with the attacker's domain name in Host, so
only loopback names, IP literals and --allowed-host names are served.
"""

from __future__ import annotations

import hmac
import ipaddress
import socket
from dataclasses import dataclass, field

LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
CORS_ALLOW_HEADERS = "authorization, content-type, x-api-key, anthropic-version, anthropic-beta, openai-beta, " \
                     "x-stainless-lang, x-stainless-package-version, x-stainless-os, x-stainless-arch, " \
                     "x-stainless-runtime, x-stainless-runtime-version, x-stainless-retry-count, " \
                     "x-stainless-timeout, x-stainless-helper-method, anthropic-dangerous-direct-browser-access"
CORS_MAX_AGE = "600"


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

    def __post_init__(self) -> None:
        self._keys = [k.encode() for k in self.api_keys]
        self._own_names = {socket.gethostname().lower()}

    # ---- API keys ------------------------------------------------------------------

    @property
    def requires_key(self) -> bool:
        return bool(self._keys)

    def key_ok(self, authorization: str | None, x_api_key: str | None) -> bool:
        presented = x_api_key
        if authorization and authorization[:7].lower() == "bearer ":
            presented = authorization[7:].strip()
        if not presented:
            return False
        candidate = presented.encode()
        # compare with every key, always: the time taken says nothing about which matched
        matched = False
        for key in self._keys:
            matched |= hmac.compare_digest(candidate, key)
        return matched

    # ---- Host ----------------------------------------------------------------------

    def host_ok(self, host_header: str | None) -> bool:
        if host_header is None:
            return True                 # HTTP/1.0 without Host: not a browser
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
