"""HTTP/1.1 request parsing and response writing (the head's grammar is http_head.py, body
framing http_body.py).

Parsing is pure over bytes: a RequestReader takes whatever recv() returned and hands back
complete Requests in order (pipelining included). It never touches a socket, a thread or a
logger. Every way a request can be wrong raises the one ProtocolError, which carries the
status to answer with; after one, the reader stays broken and the connection should close.

Line endings are CRLF only. RFC 9112 §2.2 lets a server also accept a bare LF, but one
terminator means one grammar: nothing in front of us (a proxy, a test client) can disagree
with us about where a head or a chunk line ends, which is how request smuggling starts.
Every real client sends CRLF. A bare LF in a head or in chunked framing is a 400.
"""

from __future__ import annotations

import re

from .http_body import BodyReader, NoBodyReader, body_reader_for
from .http_head import FIELD_LINE, MAX_LEADING_EMPTY_LINES, Limits, ProtocolError, Request, parse_head

__all__ = ["CONTINUE_RESPONSE", "LAST_CHUNK", "REASONS", "Limits", "ProtocolError", "Request", "RequestReader",
           "format_chunk", "format_head", "format_response"]

HEAD_END_OR_BARE_LF = re.compile(rb"\r\n\r\n|(?<!\r)\n")


# --- One connection ---------------------------------------------------------------------------
class RequestReader:
    """Incremental reader for one connection. Feed bytes; pull requests in order (pipelining)."""

    def __init__(self, limits: Limits = Limits()):
        self._limits = limits
        self._buf = bytearray()
        self._scan_from = 0  # where to resume looking for the end of the head
        self._empty_lines_skipped = 0
        self._request: Request | None = None  # head parsed, body pending
        self._body_reader: BodyReader = NoBodyReader()
        self._continue_sent = False
        self._error: ProtocolError | None = None

    def feed(self, data: bytes) -> None:
        self._buf += data

    def next_request(self) -> Request | None:
        """The next complete request, None if more bytes are needed; raises ProtocolError."""
        if self._error is not None:
            raise self._error
        try:
            return self._advance()
        except ProtocolError as error:
            if self._request is not None:
                error.path, error.method = self._request.path, self._request.method
            self._error = error
            raise

    def wants_continue(self) -> bool:
        request = self._request
        return (
            request is not None
            and not self._continue_sent
            and request.version == "HTTP/1.1"  # RFC 9110 §10.1.1: ignore it from 1.0 clients
            and (request.header("expect") or "").lower() == "100-continue"
        )

    def mark_continue_sent(self) -> None:
        self._continue_sent = True

    @property
    def has_partial(self) -> bool:
        return self._request is not None or bool(self._buf)

    def head_complete(self) -> bool:
        return self._request is not None

    @property
    def pending(self) -> Request | None:
        """The request whose head is read and whose body is not complete yet."""
        return self._request

    @property
    def body_received(self) -> int:
        """Body bytes of the pending request that have arrived so far (0 before its head)."""
        return self._body_reader.received if self._request is not None else 0

    def _advance(self) -> Request | None:
        if self._request is None:
            request = self._read_head()
            if request is None:
                return None
            self._request = request
            self._body_reader = body_reader_for(request, self._limits)
        body = self._body_reader.read(self._buf)
        if body is None:
            return None
        request, self._request = self._request, None
        request.body = body
        self._body_reader = NoBodyReader()  # the body is the request's now, not kept here too
        self._continue_sent = False
        return request

    def _read_head(self) -> Request | None:
        buf, limits = self._buf, self._limits
        while buf.startswith(b"\r\n"):
            if self._empty_lines_skipped == MAX_LEADING_EMPTY_LINES:
                raise ProtocolError(400, "too many empty lines before the request line")
            del buf[:2]
            self._empty_lines_skipped += 1
        line_end = buf.find(b"\r\n", 0, limits.max_request_line + 2)
        if line_end < 0 and len(buf) > limits.max_request_line + 1:
            raise ProtocolError(431, "request line too long")
        match = HEAD_END_OR_BARE_LF.search(buf, self._scan_from)
        if match is None:
            if len(buf) >= limits.max_header_bytes:
                raise ProtocolError(431, "request head too large")
            self._scan_from = max(0, len(buf) - 3)
            return None
        if match.group() == b"\n":
            raise ProtocolError(400, "bare LF line ending")
        if match.end() > limits.max_header_bytes:
            raise ProtocolError(431, "request head too large")
        head = bytes(buf[: match.start()])
        del buf[: match.end()]
        self._scan_from = self._empty_lines_skipped = 0
        return parse_head(head, limits)


# --- Responses --------------------------------------------------------------------------------
REASONS: dict[int, str] = {
    100: "Continue", 101: "Switching Protocols",
    200: "OK", 201: "Created", 202: "Accepted", 204: "No Content",
    301: "Moved Permanently", 302: "Found", 304: "Not Modified",
    307: "Temporary Redirect", 308: "Permanent Redirect",
    400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    405: "Method Not Allowed", 406: "Not Acceptable", 408: "Request Timeout", 409: "Conflict",
    410: "Gone", 411: "Length Required", 412: "Precondition Failed", 413: "Content Too Large",
    414: "URI Too Long", 415: "Unsupported Media Type", 417: "Expectation Failed",
    422: "Unprocessable Content", 426: "Upgrade Required", 429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error", 501: "Not Implemented", 502: "Bad Gateway",
    503: "Service Unavailable", 504: "Gateway Timeout", 505: "HTTP Version Not Supported",
    529: "Overloaded",
}  # fmt: skip
LAST_CHUNK = b"0\r\n\r\n"
CONTINUE_RESPONSE = b"HTTP/1.1 100 Continue\r\n\r\n"


def format_head(status: int, headers: list[tuple[str, str]]) -> bytes:
    """Status line, header fields and the blank line; nothing added (for streaming)."""
    if not 100 <= status <= 999:
        raise ValueError(f"invalid status code {status}")
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, '')}".encode("ascii")]
    for name, value in headers:
        line = f"{name}: {value}".encode("latin-1")
        if not FIELD_LINE.fullmatch(line):  # no CR/LF smuggled into our own responses
            raise ValueError(f"invalid response header {name!r}: {value!r}")
        lines.append(line)
    return b"\r\n".join(lines) + b"\r\n\r\n"


def format_response(
    status: int, headers: list[tuple[str, str]], body: bytes = b"", *, head_only: bool = False
) -> bytes:
    """A whole response with Content-Length; head_only (HEAD) sends the length, not the body.
    1xx, 204 and 304 carry neither (RFC 9110 §8.6)."""
    if any(name.lower() == "content-length" for name, _ in headers):
        raise ValueError("format_response sets Content-Length itself")
    if status < 200 or status in (204, 304):
        if body:
            raise ValueError(f"a {status} response has no body")
        return format_head(status, headers)
    head = format_head(status, [*headers, ("Content-Length", str(len(body)))])
    return head if head_only else head + body


def format_chunk(data: bytes) -> bytes:
    """One chunk of Transfer-Encoding: chunked; empty data gives b"", never LAST_CHUNK."""
    return b"%X\r\n%b\r\n" % (len(data), data) if data else b""
