"""Method + path → handler, with the answers HTTP expects for the rest.

A route is a path pattern (``{name}`` segments), the methods it serves, a handler,
the ErrorShape its failures use (its dialect's, which the route carries: the
router itself names no dialect) and the media type its body is sent as (JSON, or a
multipart form for the transcription routes: the app holds a browser's body to it). Unknown path → 404 in the shape of the family of
paths it falls in; known path, other method → 405 with Allow; OPTIONS → 204 with Allow;
a WebSocket handshake on a known path → 426 (this server speaks plain HTTP only).

Routing runs on the path as sent, percent-escapes kept: "/v1%2Fchat%2Fcompletions" is no
route (a proxy or an access rule in front of us that reads the path as sent must see what we
serve), and a parameter is one segment, decoded once matched, so a %2F in it is a "/" of its
value (a model id such as "namespace/model:tag").
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import unquote

from ..dialects.exchange import JSON_BODY, Exchange, Handler
from ..dialects.media_wait import request_media
from ..dialects.openai.errors import OPENAI_ERRORS
from ..errors import ApiError, ClientGone, ErrorShape
from .http import Request
from .response_writer import ResponseWriter

log = logging.getLogger("localserve.routes")


@dataclass
class Route:
    pattern: str
    methods: tuple[str, ...]
    handler: Handler
    errors: ErrorShape = OPENAI_ERRORS
    body_type: str = JSON_BODY
    regex: re.Pattern = field(init=False)

    def __post_init__(self) -> None:
        parts = re.split(r"(\{\w+\})", self.pattern)
        regex = "".join(f"(?P<{p[1:-1]}>[^/]+)" if p.startswith("{") else re.escape(p) for p in parts)
        self.regex = re.compile(regex + r"\Z")


class AccessGate(Protocol):
    """Who decides whether a request may reach its handler (the app: API keys, Host, CORS)."""

    def check_access(self, exchange: Exchange) -> None: ...

    def preflight_headers(self, exchange: Exchange, allow: str) -> list[tuple[str, str]]: ...


class Router:
    def __init__(self, gate: AccessGate):
        self.gate = gate
        self.routes: list[Route] = []
        self.families: list[tuple[str, ErrorShape]] = []   # path prefix → shape, for paths no route matches

    def add(self, pattern: str, methods: str | tuple[str, ...], handler: Handler,
            errors: ErrorShape = OPENAI_ERRORS, body_type: str = JSON_BODY) -> None:
        methods = (methods,) if isinstance(methods, str) else methods
        self.routes.append(Route(pattern, tuple(methods), handler, errors, body_type))

    def add_family(self, prefix: str, errors: ErrorShape) -> None:
        """Paths under `prefix` that no route matches still answer in `errors`' shape: the
        dialect's clients read a 404, or a malformed request's 400, there."""
        self.families.append((prefix, errors))

    def errors_for(self, path: str | None) -> ErrorShape:
        """The error shape of a path: its route's, else its family's, else OpenAI's."""
        if path is not None:
            for route, _ in self.match(path):
                return route.errors
            for prefix, errors in self.families:
                if path.startswith(prefix):
                    return errors
        return OPENAI_ERRORS

    def match(self, path: str) -> list[tuple[Route, dict[str, str]]]:
        found = []
        for route in self.routes:
            m = route.regex.match(path)
            if m:
                found.append((route, m.groupdict()))
        return found

    def pattern_of(self, path: str, method: str) -> str | None:
        """The pattern of the route serving `method` on `path` (else of any route on the path):
        what metrics count requests by, so labels stay few whatever clients send."""
        matches = self.match(path)
        for route, _ in matches:
            if method in route.methods:
                return route.pattern
        return matches[0][0].pattern if matches else None

    def allowed(self, matches: list[tuple[Route, dict[str, str]]]) -> list[str]:
        methods: list[str] = []
        for route, _ in matches:
            methods.extend(m for m in route.methods if m not in methods)
        if "GET" in methods and "HEAD" not in methods:
            methods.append("HEAD")
        return methods + ["OPTIONS"]

    def body_type_of(self, path: str) -> str:
        """The media type the body of a request on `path` is sent as (JSON unless its route says)."""
        for route, _ in self.match(path):
            return route.body_type
        return JSON_BODY

    def all_methods(self) -> list[str]:
        return self.allowed([(route, {}) for route in self.routes])

    def refusal_before_body(self, request: Request) -> ApiError | None:
        """The answer a request whose head waits for 100 Continue gets whatever its body says: the
        access gate's refusal (Host, API key, the cross-site check), no route, a method its route
        does not serve, in dispatch's order. Its client hears it at once instead of sending the
        body first to hear it after (RFC 9110 §10.1.1); None: the body is wanted."""
        matches = self.match(request.path)
        errors = matches[0][0].errors if matches else self.errors_for(request.path)
        try:
            self.gate.check_access(Exchange(request, _HeadersOnly(), {}, errors))
        except ApiError as error:
            return error
        if request.target == "*" or request.method == "OPTIONS":
            return None
        if not matches:
            return ApiError(404, f"no route for {request.path}", code="not_found")
        method = "GET" if request.method == "HEAD" else request.method
        if any(method in route.methods for route, _ in matches):
            return None
        allow = ", ".join(self.allowed(matches))
        return ApiError(405, f"method {request.method} is not allowed on {request.path}; allowed: {allow}",
                        code="method_not_allowed", headers=[("Allow", allow)])

    def dispatch(self, request: Request, writer: ResponseWriter, request_id: str = "") -> None:
        matches = self.match(request.path)
        errors = matches[0][0].errors if matches else self.errors_for(request.path)
        exchange = Exchange(request, writer, {}, errors, request_id)
        try:
            self.gate.check_access(exchange)   # auth, Host and CORS rules live in the app
            if request.target == "*":          # OPTIONS * asks about the server as a whole
                allow = ", ".join(self.all_methods())
                writer.send(204, b"", content_type=None, headers=[("Allow", allow)])
                return
            if not matches:
                raise ApiError(404, f"no route for {request.path}", code="not_found")
            if request.method == "OPTIONS":
                allow = ", ".join(self.allowed(matches))
                writer.send(204, b"", content_type=None,
                            headers=[("Allow", allow)] + self.gate.preflight_headers(exchange, allow))
                return
            method = "GET" if request.method == "HEAD" else request.method
            if method == "GET" and request.asks_for_websocket:
                raise websocket_refused(request.path)
            for route, params in matches:
                if method in route.methods:
                    exchange.params = decoded(params)
                    exchange.errors = route.errors
                    with request_media(exchange):     # each image or clip decoded once, off this thread
                        route.handler(exchange)
                    return
            allow = ", ".join(self.allowed(matches))
            raise ApiError(405, f"method {request.method} is not allowed on {request.path}; allowed: {allow}",
                           code="method_not_allowed", headers=[("Allow", allow)])
        except ClientGone:
            raise
        except ApiError as error:
            if writer.started:
                self._error_after_head(exchange, error)
                return
            exchange.send_error(error)
        except Exception:
            log.exception("handler failed for %s %s", request.method, request.path)
            error = ApiError(500, "internal server error", code="server_error")
            if writer.started:
                self._error_after_head(exchange, error)
                return
            exchange.send_error(error)

    @staticmethod
    def _error_after_head(exchange: Exchange, error: ApiError) -> None:
        """A started response can only be cut short (a stream's errors go in-band from its dialect)."""
        log.warning("error after the response started: %s", error.message)
        exchange.writer.close_after = True


class _HeadersOnly:
    """Where the access gate puts the headers of an answer that is never written (a check made
    before the body is there): a refusal is written by the server, in the route's shape."""

    def __init__(self) -> None:
        self.extra_headers: list[tuple[str, str]] = []
        self.head_only = self.started = self.finished = self.close_after = False

    def send(self, *args, **kwargs) -> None:
        raise AssertionError("no answer is written before the body")

    start_stream = stream = send


def decoded(params: dict[str, str]) -> dict[str, str]:
    """A route's parameters, each segment percent-decoded as UTF-8; a 400 for one that is not."""
    try:
        return {name: unquote(value, errors="strict") for name, value in params.items()}
    except UnicodeDecodeError:
        raise ApiError(400, "a path parameter is not percent-encoded UTF-8", code="invalid_path") from None


def websocket_refused(path: str) -> ApiError:
    """The answer to a WebSocket handshake. 426 is the one refusal Codex's Responses client takes
    as "use HTTP": it falls back at once and for the rest of its session, where a 404 or 405 is
    retried with backoff (about 7 s) first. The Upgrade field names the protocol to use instead,
    as RFC 9110 §15.5.22 asks of a 426."""
    return ApiError(426, f"{path} does not speak WebSocket on this server; send the request over plain HTTP",
                    code="websocket_not_supported", headers=[("Upgrade", "HTTP/1.1"), ("Connection", "Upgrade")])
