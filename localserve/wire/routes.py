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

from .connection import ClientGone, ResponseWriter
from ..errors import ApiError, anthropic_error_body, anthropic_status, openai_error_body
from .http import Request

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

    def json(self) -> dict[str, Any]:
        """The body as a JSON object, or a 400 naming the problem."""
        body = self.request.body
        if not body.strip():
            raise ApiError(400, "the request body is empty; expected a JSON object")
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ApiError(400, f"the request body must be a JSON object, not {type(value).__name__}")
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

    def dispatch(self, request: Request, writer: ResponseWriter, request_id: str = "") -> None:
        matches = self.match(request.path)
        dialect = matches[0][0].dialect if matches else _dialect_for(request.path)
        exchange = Exchange(request, writer, {}, self.app, dialect, request_id)
        try:
            self.app.check_access(exchange)   # auth, Host and CORS rules live in the app
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
