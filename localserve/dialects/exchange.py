"""What a handler gets from the wire: the request, where to write, path parameters.

The wire layer builds an Exchange for each request and calls the route's handler with it;
the dialects read and answer through it and never import the wire. What else a handler
uses (the models, the store, the settings) it was given when its route was added
(services.py), not through the exchange. The request and the
writer are described here by what handlers use of them (the wire's Request and
ResponseWriter fit), so the arrow runs one way: wire → dialects.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import orjson

from ..errors import ApiError, ClientGone, ErrorShape
from .openai.errors import OPENAI_ERRORS
from ..ops import memory
from ..parsing.json_depth import MAX_JSON_DEPTH, nests_deeper

log = logging.getLogger("localserve.dialects")


class IncomingRequest(Protocol):
    method: str
    path: str
    query: dict[str, str]
    body: bytes | bytearray
    host: str | None

    def header(self, name: str) -> str | None: ...


class Writer(Protocol):
    """One client's socket: a whole response or a stream. A failed write raises ClientGone."""
    extra_headers: list[tuple[str, str]]
    head_only: bool
    started: bool
    finished: bool
    close_after: bool

    def send(self, status: int, body: bytes = b"", *, content_type: str | None = "application/json",
             headers: list[tuple[str, str]] | None = None) -> None: ...

    def start_stream(self, status: int = 200, *, content_type: str = "text/event-stream",
                     headers: list[tuple[str, str]] | None = None) -> None: ...

    def stream(self, data: bytes) -> None: ...

    def end_stream(self) -> None: ...

    def peer_closed(self) -> bool: ...

    def peer_host(self) -> str: ...


@dataclass(frozen=True)
class Scope:
    """What of other clients' work a request may see (wire/access.py decides it from the API key):
    `owner` scopes stored responses, conversations and sealed blobs, `cache` the prompt caches
    (slots, shared prefixes, the RAM cache). The same ("") for every request unless several keys
    are configured: each key then has its own, and --shared-cache gives all keys one `cache`."""
    owner: str = ""
    cache: str = ""


@dataclass
class Exchange:
    request: IncomingRequest
    writer: Writer
    params: dict[str, str]
    errors: ErrorShape = OPENAI_ERRORS     # the route's dialect: how its clients read an error
    request_id: str = ""
    stream_open: bool = False      # the stream's head is out (pump.open_stream), maybe while the model loaded
    # the head went out before the handler knew its answer (a model load: loading.py; a clip's decode:
    # media_wait.py): an error then goes in the stream
    opened_early: bool = False
    scope: Scope = Scope()         # set by the access check, before the handler runs
    _json: dict | None = field(default=None, repr=False)

    def has_body(self) -> bool:
        body = self.request.body
        return bool(body) and not body.isspace()     # not body.strip(): that copies the body

    def json(self, *, array: bool = False) -> Any:
        """The body as a JSON object (or, with `array`, an array too), or a 400 naming the problem.
        Parsed once; the raw bytes are dropped then, so a request holds one copy of its text, not two."""
        if self._json is not None:
            return self._json
        if not self.has_body():
            raise ApiError(400, "the request body is empty; expected a JSON object")
        try:
            with memory.gc_paused():
                value = orjson.loads(self.request.body)
        except orjson.JSONDecodeError as exc:
            raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
        if not isinstance(value, dict) and not (array and isinstance(value, list)):
            raise ApiError(400, f"the request body must be a JSON {'array' if array else 'object'}, "
                                f"not {type(value).__name__}")
        if nests_deeper(self.request.body, value, MAX_JSON_DEPTH):
            raise ApiError(400, f"the request body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels "
                                f"(MAX_JSON_DEPTH)", code="json_too_deep")
        self.request.body = b""
        self._json = value
        return value

    def raise_if_gone(self) -> None:
        """ClientGone when the client has closed its connection: a long prompt build (truncation,
        a long stored chain, context edits) checks between its steps and stops."""
        if self.writer.peer_closed():
            log.info("%s %s (%s): the client left while its prompt was built; stopped",
                     self.request.method, self.request.path, self.request_id)
            raise ClientGone()

    def send_json(self, value: Any, status: int = 200, headers: list[tuple[str, str]] | None = None) -> None:
        self.writer.send(status, orjson.dumps(value), headers=headers)

    def send_error(self, error: ApiError) -> None:
        status, body = self.errors.render(error)
        self.writer.send(status, body, headers=error.headers)


Handler = Callable[[Exchange], None]


JSON_BODY = "application/json"
FORM_BODY = "multipart/form-data"     # a route whose body is a form (the transcription routes)


class RouteTable(Protocol):
    """Where a dialect registers its routes (the wire's Router), with the media type their
    bodies are sent as (a browser's body is held to it: app.py)."""

    def add(self, pattern: str, methods: str | tuple[str, ...], handler: Handler,
            errors: ErrorShape = OPENAI_ERRORS, body_type: str = JSON_BODY) -> None: ...

    def add_family(self, prefix: str, errors: ErrorShape) -> None: ...
