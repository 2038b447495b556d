"""Method + path → handler, with the answers HTTP expects for the rest.

A route is a path pattern (``{name}`` segments), the methods it serves, a handler
and the dialect whose error shape its failures use. Unknown path → 404; known path,
other method → 405 with Allow; OPTIONS → 204 with Allow.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any, Callable

import orjson

from ..ops import memory
from .connection import ClientGone, ResponseWriter
from ..errors import ApiError, anthropic_error_body, anthropic_status, openai_error_body
from .http import Request
from ..settings import MAX_JSON_DEPTH

log = logging.getLogger("localserve.routes")

OPENAI = "openai"
ANTHROPIC = "anthropic"


@dataclass
class Exchange:
    """What a handler gets: the request, where to write, path parameters, the app."""
    request: Request
    writer: ResponseWriter
    params: dict[str, str]
    app: Any
    dialect: str = OPENAI
    request_id: str = ""
    _json: dict | None = field(default=None, repr=False)

    def has_body(self) -> bool:
        body = self.request.body
        return bool(body) and not body.isspace()     # not body.strip(): that copies the body

    def json(self) -> dict[str, Any]:
        """The body as a JSON object, or a 400 naming the problem. Parsed once; the raw bytes are
        dropped then, so a request holds one copy of its text, not two."""
        if self._json is not None:
            return self._json
        if not self.has_body():
            raise ApiError(400, "the request body is empty; expected a JSON object")
        try:
            with memory.gc_paused():
                value = orjson.loads(self.request.body)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ApiError(400, f"the request body must be a JSON object, not {type(value).__name__}")
        if nests_deeper(self.request.body, value, MAX_JSON_DEPTH):
            raise ApiError(400, f"the request body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels "
                                f"(MAX_JSON_DEPTH)", code="json_too_deep")
        self.request.body = b""
        self._json = value
        return value

    def send_json(self, value: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> None:
        self.writer.send(status, orjson.dumps(value), headers=headers)

    def send_error(self, error: ApiError) -> None:
        send_error(self.writer, error, self.dialect)


Handler = Callable[[Exchange], None]


@dataclass
class Route:
    pattern: str
    methods: tuple[str, ...]
    handler: Handler
    dialect: str = OPENAI
    regex: re.Pattern = field(init=False)

    def __post_init__(self) -> None:
        parts = re.split(r"(\{\w+\})", self.pattern)
        regex = "".join(f"(?P<{p[1:-1]}>[^/]+)" if p.startswith("{") else re.escape(p) for p in parts)
        self.regex = re.compile(regex + r"\Z")


def nests_deeper(body: bytes | bytearray, value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` deep. The readers, schema walks,
    templates and store writes after this recurse; checked once, here, without recursion.
    Fewer brackets in the body than the limit can't nest past it (the usual case, no walk);
    otherwise a walk level by level, where an empty container leads no deeper and is dropped:
    about a second for 7.5 million of them (a walk of (node, depth) pairs took twelve)."""
    if body.count(b"[") + body.count(b"{") <= limit:
        return False
    level = [value]
    for _ in range(limit - 1):
        level = [child for node in level for child in (node.values() if type(node) is dict else node)
                 if (type(child) is dict or type(child) is list) and child]
        if not level:
            return False
    return any(type(child) is dict or type(child) is list
               for node in level for child in (node.values() if type(node) is dict else node))


def send_error(writer: ResponseWriter, error: ApiError, dialect: str = OPENAI) -> None:
    if dialect == ANTHROPIC:
        status, body = anthropic_status(error.status), anthropic_error_body(error)
    else:
        status, body = error.status, openai_error_body(error)
    writer.send(status, orjson.dumps(body), headers=error.headers)


class Router:
    def __init__(self, app: Any):
        self.app = app
        self.routes: list[Route] = []

    def add(self, pattern: str, methods: str | tuple[str, ...], handler: Handler, dialect: str = OPENAI) -> None:
        methods = (methods,) if isinstance(methods, str) else methods
        self.routes.append(Route(pattern, tuple(methods), handler, dialect))

    def match(self, path: str) -> list[tuple[Route, dict[str, str]]]:
        found = []
        for route in self.routes:
            m = route.regex.match(path)
            if m:
                found.append((route, m.groupdict()))
        return found

    def allowed(self, matches: list[tuple[Route, dict[str, str]]]) -> list[str]:
        methods: list[str] = []
        for route, _ in matches:
            methods.extend(m for m in route.methods if m not in methods)
        if "GET" in methods and "HEAD" not in methods:
            methods.append("HEAD")
        return methods + ["OPTIONS"]

    def all_methods(self) -> list[str]:
        return self.allowed([(route, {}) for route in self.routes])

    def dispatch(self, request: Request, writer: ResponseWriter, request_id: str = "") -> None:
        matches = self.match(request.path)
        dialect = matches[0][0].dialect if matches else _dialect_for(request.path)
        exchange = Exchange(request, writer, {}, self.app, dialect, request_id)
        try:
            self.app.check_access(exchange)   # auth, Host and CORS rules live in the app
            if request.target == "*":          # OPTIONS * asks about the server as a whole
                allow = ", ".join(self.all_methods())
                writer.send(204, b"", content_type=None, headers=[("Allow", allow)])
                return
            if not matches:
                raise ApiError(404, f"no route for {request.path}", code="not_found")
            if request.method == "OPTIONS":
                allow = ", ".join(self.allowed(matches))
                writer.send(204, b"", content_type=None,
                            headers=[("Allow", allow)] + self.app.preflight_headers(exchange, allow))
                return
            method = "GET" if request.method == "HEAD" else request.method
            for route, params in matches:
                if method in route.methods:
                    exchange.params = params
                    exchange.dialect = route.dialect
                    route.handler(exchange)
                    return
            allow = ", ".join(self.allowed(matches))
            raise ApiError(405, f"method {request.method} is not allowed on {request.path}; allowed: {allow}",
                           code="method_not_allowed", headers=[("Allow", allow)])
        except ClientGone:
            raise
        except ApiError as error:
            if writer.started:
                log.warning("error after the response started: %s", error.message)
                writer.close_after = True
                return
            exchange.send_error(error)
        except Exception:
            log.exception("handler failed for %s %s", request.method, request.path)
            if writer.started:
                writer.close_after = True
                return
            exchange.send_error(ApiError(500, "internal server error", code="server_error"))


def _dialect_for(path: str) -> str:
    return ANTHROPIC if path.startswith("/v1/messages") else OPENAI
