"""HTTP to the Hub (or the mirror $HF_ENDPOINT names), on http.client: the JSON API and file
bodies, with the rules a download from an untrusted network needs.

- Redirects (the Hub sends LFS files to a CDN on another host) are followed MAX_REDIRECTS deep,
  to http or https only and never from https down to http; the token goes to the endpoint's
  own host alone, never where a redirect leads.
- Every read has a timeout (a stalled mirror is an error, not a hang); API answers are bounded
  (MAX_API_BYTES); an HTML page where JSON or a file was asked for is named as such (a captive
  portal, a mirror serving its front page).
- The Hub's error answers (X-Error-Code: RepoNotFound, GatedRepo, EntryNotFound,
  RevisionNotFound; huggingface_hub's utils/_http.py reads the same) become HubErrors.
"""

from __future__ import annotations

import http.client
import os
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import quote, urljoin, urlsplit

import orjson

from ... import __version__
from .errors import HubError

DEFAULT_ENDPOINT = "https://huggingface.co"
CONNECT_TIMEOUT = 30.0      # seconds to reach the Hub or a mirror
READ_TIMEOUT = 60.0         # seconds a read may wait for the next bytes before the pull fails (resumable)
MAX_REDIRECTS = 5
MAX_API_BYTES = 16 << 20    # a repo listing of thousands of files is a few MB
API_DEADLINE = 120.0        # seconds one API answer may take whole (a mirror dripping a byte at a time)
REDIRECTS = (301, 302, 303, 307, 308)
USER_AGENT = f"localserve/{__version__}"


@dataclass(frozen=True)
class HubConfig:
    endpoint: str
    token: str | None
    offline: bool

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> HubConfig:
        env = os.environ if environ is None else environ
        endpoint = (env.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
        token = env.get("HF_TOKEN") or env.get("HUGGING_FACE_HUB_TOKEN") or None
        offline = (env.get("HF_HUB_OFFLINE") or "").strip().lower() in ("1", "true", "yes", "on")
        return cls(endpoint, token, offline)

    @property
    def host(self) -> str:
        return (urlsplit(self.endpoint).hostname or "").lower()


class Response:
    """An open answer: status, headers, and its body read in pieces."""

    def __init__(self, conn: http.client.HTTPConnection, answer: http.client.HTTPResponse, url: str):
        self.conn, self.answer, self.url = conn, answer, url
        self.status = answer.status

    def header(self, name: str) -> str | None:
        return self.answer.getheader(name)

    def read(self, size: int) -> bytes:
        try:
            return self.answer.read1(size) if hasattr(self.answer, "read1") else self.answer.read(size)
        except (OSError, http.client.HTTPException) as exc:
            raise HubError(502, f"the download from {shown_host(self.url)} broke off: {describe(exc)}") from None

    def close(self) -> None:
        self.conn.close()


class HubClient:
    def __init__(self, config: HubConfig):
        self.config = config
        endpoint = urlsplit(config.endpoint)
        if endpoint.scheme not in ("http", "https") or not endpoint.hostname:
            raise HubError(400, f"HF_ENDPOINT '{config.endpoint}' is not an http(s) URL", "invalid_endpoint")

    def api_url(self, *parts: str, query: str = "") -> str:
        path = "/".join(quote(p, safe="/") for p in parts)
        return f"{self.config.endpoint}/api/{path}" + (f"?{query}" if query else "")

    def file_url(self, repo_id: str, commit: str, path: str) -> str:
        return f"{self.config.endpoint}/{quote(repo_id, safe='/')}/resolve/{commit}/{quote(path, safe='/')}"

    def get_json(self, url: str, what: str) -> tuple[object, Response]:
        """The JSON at url (and its answer, closed); HubError naming `what` otherwise."""
        answer = self.open(url, headers={"Accept": "application/json"}, what=what)
        try:
            if is_html(answer.header("Content-Type")):
                raise html_error(url)
            declared = answer.header("Content-Length")
            if declared and declared.isdigit() and int(declared) > MAX_API_BYTES:
                raise HubError(502, f"{what}: {shown_host(url)} answered {declared} bytes; more than a listing holds")
            body = bytearray()
            deadline = time.monotonic() + API_DEADLINE
            while chunk := answer.read(1 << 16):
                body += chunk
                if len(body) > MAX_API_BYTES:
                    raise HubError(502, f"{what}: {shown_host(url)} answered more than {MAX_API_BYTES} bytes")
                if time.monotonic() > deadline:     # each read within READ_TIMEOUT is no bound on them all
                    raise HubError(502, f"{what}: {shown_host(url)} took more than {API_DEADLINE:g} s to answer")
        finally:
            answer.close()
        try:
            return orjson.loads(body), answer
        except ValueError:
            raise HubError(502, f"{what}: {shown_host(url)} did not answer JSON") from None

    def open(self, url: str, headers: dict[str, str] | None = None, what: str = "the request") -> Response:
        """GET url, redirects followed; a 2xx answer, open (the caller closes it)."""
        for _ in range(MAX_REDIRECTS + 1):
            answer = self._get(url, headers or {})
            if answer.status not in REDIRECTS:
                if answer.status >= 300:
                    try:
                        raise status_error(answer, what, bool(self.config.token))
                    finally:
                        answer.close()
                return answer
            location = answer.header("Location")
            answer.close()
            if not location:
                raise HubError(502, f"{what}: {shown_host(url)} redirected nowhere (no Location)")
            url = self._redirect_target(url, location, what)
        raise HubError(502, f"{what}: more than {MAX_REDIRECTS} redirects")

    def _redirect_target(self, current: str, location: str, what: str) -> str:
        target = urljoin(current, location.strip())
        try:
            urlsplit(target).port       # a port past 65535 is a ValueError wherever it is read
        except ValueError:
            raise HubError(502, f"{what}: {shown_host(current)} redirected to a URL that cannot be opened (its port "
                                f"is no port)") from None
        scheme = urlsplit(target).scheme.lower()
        if scheme not in ("http", "https") or not urlsplit(target).hostname:
            raise HubError(502, f"{what}: {shown_host(current)} redirected to a {scheme or 'relative'}: URL; "
                                f"only http and https are followed")
        if urlsplit(current).scheme == "https" and scheme == "http":
            raise HubError(502, f"{what}: {shown_host(current)} redirected from https down to http; not followed")
        return target

    def _get(self, url: str, headers: dict[str, str]) -> Response:
        parts = urlsplit(url)
        if parts.scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=CONNECT_TIMEOUT, context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=CONNECT_TIMEOUT)
        sent = {"User-Agent": USER_AGENT, **headers}
        if self.config.token and same_origin(url, self.config.endpoint):
            sent["Authorization"] = f"Bearer {self.config.token}"
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        try:
            conn.request("GET", target, headers=sent)
            conn.sock.settimeout(READ_TIMEOUT)
            return Response(conn, conn.getresponse(), url)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise HubError(502, f"cannot reach {shown_host(url)}: {describe(exc)}", "hub_unreachable") from None


def same_origin(url: str, endpoint: str) -> bool:
    a, b = urlsplit(url), urlsplit(endpoint)
    return (a.scheme, a.hostname, a.port) == (b.scheme, b.hostname, b.port)


def status_error(answer: Response, what: str, has_token: bool) -> HubError:
    code = answer.header("X-Error-Code") or ""
    status = answer.status
    if code == "GatedRepo" or (status in (401, 403) and "gated" in (answer.header("X-Error-Message") or "").lower()):
        if has_token:
            return HubError(403, f"{what}: the repo is gated and HF_TOKEN has no access to it: accept its terms on "
                                 f"the Hub with that account", "gated_repo")
        return HubError(401, f"{what}: the repo is gated: accept its terms on the Hub and set HF_TOKEN", "gated_repo")
    if code == "RevisionNotFound":
        return HubError(404, f"{what}: no such revision", "revision_not_found")
    if code == "EntryNotFound":
        return HubError(404, f"{what}: no such file in the repo", "file_not_found")
    if code == "RepoNotFound" or status in (401, 404):
        private = "" if has_token else " (or it is private: set HF_TOKEN)"
        return HubError(404, f"{what}: no such repo on {shown_host(answer.url)}{private}", "repo_not_found")
    if status == 403:
        return HubError(403, f"{what}: {shown_host(answer.url)} refused access (403)", "forbidden")
    if status == 416:
        return HubError(502, f"{what}: {shown_host(answer.url)} refused the range asked (416)")
    return HubError(502, f"{what}: {shown_host(answer.url)} answered HTTP {status}")


def is_html(content_type: str | None) -> bool:
    return (content_type or "").split(";")[0].strip().lower() in ("text/html", "application/xhtml+xml")


def html_error(url: str) -> HubError:
    return HubError(502, f"{shown_host(url)} answered with an HTML page, not the Hub's answer (a captive portal or "
                         f"a mirror that does not serve the Hub's API?)", "not_a_hub")


def shown_host(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.netloc else url[:80]


def describe(exc: BaseException) -> str:
    if isinstance(exc, socket.timeout):
        return f"no answer within {READ_TIMEOUT:g} s"
    return getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
