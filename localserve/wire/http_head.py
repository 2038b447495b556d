"""An HTTP/1.1 request head: the request line, field lines, the target and the Host, and the
limits and the one error the parser speaks in (see http.py for the reader that finds a head)."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit

# --- The head's grammar (RFC 9110, RFC 9112), as regexes; body framing's is in http_body.py
TOKEN = rb"[-!#$%&'*+.^_`|~0-9A-Za-z]+"
FIELD_CHARS = rb"[\t\x20-\x7e\x80-\xff]"  # field-vchar, SP and HTAB: no other control chars
REQUEST_LINE = re.compile(
    rb"(?P<method>" + TOKEN + rb") (?P<target>[\x21-\x7e]+) (?P<version>HTTP/[0-9]\.[0-9])"
)
FIELD_LINE = re.compile(rb"(?P<name>" + TOKEN + rb"):(?P<value>" + FIELD_CHARS + rb"*)")
SPACE_BEFORE_COLON = re.compile(TOKEN + rb"[ \t]+:")
ABSOLUTE_FORM = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
# Host (RFC 9110 §7.2) = uri-host [ ":" port ], with RFC 3986 §3.2.2's host: no userinfo, no
# other ":" than the port's, a port of digits only. "localhost:80@evil.com" is not a host.
REG_NAME = r"(?:[-A-Za-z0-9._~!$&'()*+,;=]|%[0-9A-Fa-f]{2})*"
IP_LITERAL = r"\[(?:[0-9A-Fa-f:.]+|[vV][0-9A-Fa-f]+\.[-A-Za-z0-9._~!$&'()*+,;=:]+)\]"
HOST = re.compile(rf"(?P<host>{IP_LITERAL}|{REG_NAME})(?::(?P<port>[0-9]*))?")
MAX_PORT = 65535
OWS = b" \t"

# --- Rules that are not limits --------------------------------------------------------------
SUPPORTED_VERSIONS = ("HTTP/1.1", "HTTP/1.0")
MAX_LEADING_EMPTY_LINES = 4  # RFC 9112 §2.2: skip "at least one" empty line before a request


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
    path: str  # the path as sent, without the query: percent-escapes kept (routing runs on it, a route
               # decodes its parameters: "/v1%2Fmodels" is no "/v1/models", a %2F in a model id no "/")
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

    @property
    def asks_for_websocket(self) -> bool:
        """A WebSocket opening handshake (RFC 6455 §4.1): `Upgrade: websocket`, whatever else."""
        return any(token.strip().lower() == "websocket" for v in self._values("upgrade") for token in v.split(","))

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
    if any(not is_host(value) for value in hosts):
        raise ProtocolError(400, "the Host header is not a host[:port]")   # RFC 9112 §3.2
    if ABSOLUTE_FORM.match(target):
        request.target_authority = target_authority(target)
    return request


def is_host(value: str) -> bool:
    """Whether a Host value (or a target's authority) is host[:port]: HOST's grammar, a port
    of 0-65535 (or none after the colon, as RFC 3986 allows), an IPv6 literal that is one."""
    match = HOST.fullmatch(value)
    if match is None:
        return False
    port = match["port"]
    if port and (len(port.lstrip("0")) > len(str(MAX_PORT)) or int(port) > MAX_PORT):
        return False                    # never int() a kilobyte of digits
    host = match["host"]
    if host.startswith("[") and host[1:2] not in ("v", "V"):    # IPvFuture: the grammar's alone
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return False
    return True


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
    """The path (as sent: percent-escapes kept) and the decoded query of an origin-form,
    absolute-form or "*" target."""
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
    return path, dict(parse_qsl(query, keep_blank_values=True))


def target_authority(target: str) -> str:
    """host[:port] of an absolute-form target; only http(s), with a host and no userinfo."""
    scheme, _, rest = target.partition("://")
    if scheme.lower() not in ("http", "https"):
        raise ProtocolError(400, f"the target's scheme must be http or https, not '{scheme}'")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    if "@" in authority:
        raise ProtocolError(400, "userinfo in the request target is not allowed")   # RFC 9110 §4.2.4
    if not authority or authority.startswith(":") or not is_host(authority):
        raise ProtocolError(400, "the request target's authority is not a host[:port]")
    return authority
