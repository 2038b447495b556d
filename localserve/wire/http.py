"""HTTP/1.1 request parsing and response writing.

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
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

# --- Grammar (RFC 9110, RFC 9112), as regexes in one place -----------------------------------
TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
FIELD_CHARS = rb"[\t\x20-\x7e\x80-\xff]"  # field-vchar, SP and HTAB: no other control chars
REQUEST_LINE = re.compile(
    rb"(?P<method>" + TOKEN + rb") (?P<target>[\x21-\x7e]+) (?P<version>HTTP/[0-9]\.[0-9])"
)
FIELD_LINE = re.compile(rb"(?P<name>" + TOKEN + rb"):(?P<value>" + FIELD_CHARS + rb"*)")
SPACE_BEFORE_COLON = re.compile(TOKEN + rb"[ \t]+:")
CHUNK_SIZE_LINE = re.compile(rb"(?P<size>[0-9A-Fa-f]{1,16})[ \t]*(?:;" + FIELD_CHARS + rb"*)?")
CONTENT_LENGTH = re.compile(r"[0-9]+")
ABSOLUTE_FORM = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
HEAD_END_OR_BARE_LF = re.compile(rb"\r\n\r\n|(?<!\r)\n")
# Host (RFC 9110 §7.2) = uri-host [ ":" port ], with RFC 3986 §3.2.2's host: no userinfo, no
# other ":" than the port's, a port of digits only. "localhost:80@evil.com" is not a host.
REG_NAME = r"(?:[-A-Za-z0-9._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})*"
IP_LITERAL = r"\[(?:[0-9A-Fa-f:.]+|[vV][0-9A-Fa-f]+\.[-A-Za-z0-9._~!$&'()*+,;=:]+)\]"
HOST = re.compile(rf"(?:{IP_LITERAL}|{REG_NAME})(?::[0-9]*)?")
OWS = b" \t"

# --- Rules that are not limits --------------------------------------------------------------
SUPPORTED_VERSIONS = ("HTTP/1.1", "HTTP/1.0")
MAX_LEADING_EMPTY_LINES = 4  # RFC 9112 §2.2: skip "at least one" empty line before a request
MAX_CHUNK_SIZE_LINE = 1024  # chunk-size plus extensions; longer is garbage, not a big chunk


class ProtocolError(Exception):
    """The one error the parser raises. .status (int HTTP status), .message (str)."""

    def __init__(self, status: int, message: str, headers: list[tuple[str, str]] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or []  # extra response fields (Retry-After)
        self.path: str | None = None  # the request's path, when its head was read (error shape, metrics)
        self.method: str | None = None  # and its method (an answer to HEAD has no body)


@dataclass(frozen=True)
class Limits:
    max_request_line: int = 8192
    max_header_bytes: int = 65536  # whole head incl. request line
    max_header_count: int = 100
    max_body_bytes: int = 64 * 1024 * 1024


@dataclass
class Request:
    method: str
    target: str  # raw request-target
    path: str  # percent-decoded path without query
    query: dict[str, str]  # last value wins
    version: str  # "HTTP/1.1" or "HTTP/1.0"
    headers: list[tuple[str, str]]  # names lower-cased, values stripped, in order
    body: bytes | bytearray = b""  # the bytes as read, never copied (the reader's own buffer)
    target_authority: str | None = None  # host[:port] of an absolute-form target

    def header(self, name: str, default: str | None = None) -> str | None:
        values = self._values(name)
        return ", ".join(values) if values else default

    @property
    def host(self) -> str | None:
        """The host the request is for: an absolute-form target's authority replaces the Host
        header (RFC 9112 §3.2.2), so the Host rules are checked against what will be served."""
        return self.target_authority if self.target_authority is not None else self.header("host")

    @property
    def keep_alive(self) -> bool:
        options = {o.strip().lower() for v in self._values("connection") for o in v.split(",")}
        if self.version == "HTTP/1.1":
            return "close" not in options
        return "keep-alive" in options and "close" not in options

    def _values(self, name: str) -> list[str]:
        name = name.lower()
        return [value for key, value in self.headers if key == name]


# --- The head ---------------------------------------------------------------------------------
def parse_head(head: bytes, limits: Limits = Limits()) -> Request:
    """Parse a request line and its field lines (CRLF-separated, no final blank line)."""
    request_line, *field_lines = head.split(b"\r\n")
    if len(request_line) > limits.max_request_line:
        raise ProtocolError(431, "request line too long")
    if len(field_lines) > limits.max_header_count:
        raise ProtocolError(431, "too many header fields")
    method, target, version = parse_request_line(request_line)
    if target == "*" and method != "OPTIONS":
        raise ProtocolError(400, "the target * is for OPTIONS only")   # RFC 9112 §3.2.4
    path, query = split_target(target)
    headers = [parse_field_line(line) for line in field_lines]
    request = Request(method, target, path, query, version, headers)
    hosts = request._values("host")
    if version == "HTTP/1.1" and len(hosts) != 1:
        raise ProtocolError(400, "HTTP/1.1 needs exactly one Host header")
    if any(not HOST.fullmatch(value) for value in hosts):
        raise ProtocolError(400, "the Host header is not a host[:port]")   # RFC 9112 §3.2
    if ABSOLUTE_FORM.match(target):
        request.target_authority = target_authority(target)
    return request


def parse_request_line(line: bytes) -> tuple[str, str, str]:
    match = REQUEST_LINE.fullmatch(line)
    if match is None:
        raise ProtocolError(400, "malformed request line")
    version = match["version"].decode("ascii")
    if version not in SUPPORTED_VERSIONS:
        raise ProtocolError(505, f"{version} is not supported")
    return match["method"].decode("ascii"), match["target"].decode("ascii"), version


def parse_field_line(line: bytes) -> tuple[str, str]:
    match = FIELD_LINE.fullmatch(line)
    if match is not None:
        return match["name"].decode("ascii").lower(), match["value"].strip(OWS).decode("latin-1")
    if line[:1] in (b" ", b"\t"):
        raise ProtocolError(400, "obsolete line folding is not allowed")
    if b":" not in line:
        raise ProtocolError(400, "header field without a colon")
    if SPACE_BEFORE_COLON.match(line):
        raise ProtocolError(400, "whitespace between header name and colon")
    raise ProtocolError(400, "invalid character in header field")


def split_target(target: str) -> tuple[str, dict[str, str]]:
    """Percent-decoded path and query of an origin-form, absolute-form or "*" target."""
    if target == "*":
        return "*", {}
    if target.startswith("/"):
        path, _, query = target.partition("?")
    elif ABSOLUTE_FORM.match(target):
        try:
            parts = urlsplit(target)
        except ValueError as error:
            raise ProtocolError(400, f"malformed request target: {error}") from None
        path, query = parts.path or "/", parts.query
    else:
        raise ProtocolError(400, "request target must be a path, an absolute URI or *")
    return unquote(path), dict(parse_qsl(query, keep_blank_values=True))


def target_authority(target: str) -> str:
    """host[:port] of an absolute-form target; only http(s), with a host and no userinfo."""
    scheme, _, rest = target.partition("://")
    if scheme.lower() not in ("http", "https"):
        raise ProtocolError(400, f"the target's scheme must be http or https, not '{scheme}'")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        raise ProtocolError(400, "userinfo in the request target is not allowed")   # RFC 9110 §4.2.4
    if not authority or authority.startswith(":") or not HOST.fullmatch(authority):
        raise ProtocolError(400, "the request target's authority is not a host[:port]")
    return authority


# --- Body framing -----------------------------------------------------------------------------
# Strategy (as in h11's _readers.py): once the head is parsed, one reader object owns the body.
# Its read(buf) consumes what it can from the front of the receive buffer and returns the whole
# body when complete, None when it needs more bytes, or raises ProtocolError. Whatever it leaves
# in the buffer belongs to the next (pipelined) request.


# A body is handed over as the bytearray it was read into: one copy of it, never two. committed
# says how many body bytes the framing has announced so far, so the server can hold them against
# its in-flight budget before they arrive.


class BodyReader(Protocol):
    def read(self, buf: bytearray) -> bytes | bytearray | None: ...

    @property
    def committed(self) -> int: ...


class NoBodyReader:
    """No Content-Length, no Transfer-Encoding: a request has no body (RFC 9112 §6.3)."""

    committed = 0

    def read(self, buf: bytearray) -> bytes | None:
        return b""


class ContentLengthReader:
    def __init__(self, length: int):
        self.committed = length
        self._remaining = length
        self._body = bytearray()

    def read(self, buf: bytearray) -> bytearray | None:
        with memoryview(buf) as view:   # no temporary copy of what is taken
            self._body += view[: self._remaining]
        taken = min(len(buf), self._remaining)
        del buf[:taken]
        self._remaining -= taken
        return self._body if self._remaining == 0 else None


class ChunkedReader:
    """chunk-size [;ext] CRLF data CRLF ... 0 CRLF *(trailer CRLF) CRLF; extensions and
    trailers are read and ignored."""

    def __init__(self, limits: Limits):
        self._limits = limits
        self._body = bytearray()
        self._remaining = 0  # data bytes left in the current chunk
        self._state = "size"  # size -> data -> data-end -> size ... -> trailers
        self._trailer_bytes = 0
        self._line_scanned = 0  # bytes of a partial line already searched for its CRLF

    @property
    def committed(self) -> int:
        return len(self._body) + self._remaining

    def read(self, buf: bytearray) -> bytearray | None:
        while True:
            if self._state == "size":
                line = self._take_line(buf, MAX_CHUNK_SIZE_LINE, "chunk-size line", 400)
                if line is None:
                    return None
                self._start_chunk(line)
            elif self._state == "data":
                with memoryview(buf) as view:
                    self._body += view[: self._remaining]
                taken = min(len(buf), self._remaining)
                del buf[:taken]
                self._remaining -= taken
                if self._remaining:
                    return None
                self._state = "data-end"
            elif self._state == "data-end":
                if len(buf) < 2:
                    return None
                if buf[:2] != b"\r\n":
                    raise ProtocolError(400, "chunk data not followed by CRLF")
                del buf[:2]
                self._state = "size"
            else:
                line = self._take_line(buf, self._limits.max_header_bytes, "trailer", 431)
                if line is None:
                    return None
                if line == b"":
                    return self._body
                self._read_trailer(line)

    def _take_line(self, buf: bytearray, limit: int, what: str, status: int) -> bytes | None:
        line = take_line(buf, limit, what, status, self._line_scanned)
        self._line_scanned = max(0, len(buf) - 1) if line is None else 0
        return line

    def _start_chunk(self, line: bytes) -> None:
        match = CHUNK_SIZE_LINE.fullmatch(line)
        if match is None:
            raise ProtocolError(400, "malformed chunk-size line")
        size = int(match["size"], 16)
        if len(self._body) + size > self._limits.max_body_bytes:
            raise ProtocolError(413, "request body too large")
        self._remaining = size
        self._state = "data" if size else "trailers"

    def _read_trailer(self, line: bytes) -> None:
        self._trailer_bytes += len(line) + 2
        if self._trailer_bytes > self._limits.max_header_bytes:
            raise ProtocolError(431, "trailer section too large")
        parse_field_line(line)


def take_line(
    buf: bytearray, limit: int, what: str, too_long_status: int, start: int = 0
) -> bytes | None:
    """Remove one CRLF-terminated line of at most `limit` bytes from buf; None if incomplete.
    buf[:start] is known to hold no LF (it was searched before; start may sit on a CR)."""
    end = buf.find(b"\r\n", start, limit + 2)
    if buf.find(b"\n", start, end if end >= 0 else limit + 2) >= 0:
        raise ProtocolError(400, "bare LF line ending")
    if end < 0:
        if len(buf) > limit + 1:
            raise ProtocolError(too_long_status, f"{what} too long")
        return None
    line = bytes(buf[:end])
    del buf[: end + 2]
    return line


def body_reader_for(request: Request, limits: Limits) -> BodyReader:
    """Choose the body framing from the head (RFC 9112 §6.1-6.3)."""
    transfer_encoding = request._values("transfer-encoding")
    content_length = request._values("content-length")
    if transfer_encoding:
        if request.version == "HTTP/1.0":
            raise ProtocolError(400, "Transfer-Encoding in an HTTP/1.0 request")
        if content_length:
            raise ProtocolError(400, "both Content-Length and Transfer-Encoding")
        codings = [c.strip().lower() for v in transfer_encoding for c in v.split(",")]
        codings = [c for c in codings if c]
        if not codings or codings[-1] != "chunked" or codings.count("chunked") > 1:
            raise ProtocolError(400, "chunked must be the final transfer coding, once")
        if codings != ["chunked"]:
            raise ProtocolError(501, "only Transfer-Encoding: chunked is supported")
        return ChunkedReader(limits)
    if content_length:
        return ContentLengthReader(parse_content_length(content_length, limits))
    return NoBodyReader()


def parse_content_length(values: list[str], limits: Limits) -> int:
    lengths = {item.strip() for value in values for item in value.split(",")}
    if len(lengths) != 1:
        raise ProtocolError(400, "conflicting Content-Length values")
    (length,) = lengths
    if not CONTENT_LENGTH.fullmatch(length):
        raise ProtocolError(400, "Content-Length is not a number")
    digits = length.lstrip("0") or "0"  # never int() a 60 KB string of digits
    if len(digits) > len(str(limits.max_body_bytes)) or int(digits) > limits.max_body_bytes:
        raise ProtocolError(413, "request body too large")
    return int(digits)


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
    def body_committed(self) -> int:
        """Body bytes the pending request's framing has announced so far (0 before its head)."""
        return self._body_reader.committed if self._request is not None else 0

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
