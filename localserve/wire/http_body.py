"""An HTTP/1.1 request body's framing: none, Content-Length, or chunked (RFC 9112 §6-7)."""

from __future__ import annotations

import re
from typing import Protocol

from .http_head import FIELD_CHARS, Limits, ProtocolError, Request, parse_field_line

CHUNK_SIZE_LINE = re.compile(rb"(?P<size>[0-9A-Fa-f]{1,16})[ \t]*(?:;" + FIELD_CHARS + rb"*)?")
CONTENT_LENGTH = re.compile(r"[0-9]+")
MAX_CHUNK_SIZE_LINE = 1024  # chunk-size plus extensions; longer is garbage, not a big chunk

# Strategy (as in h11's _readers.py): once the head is parsed, one reader object owns the body.
# Its read(buf) consumes what it can from the front of the receive buffer and returns the whole
# body when complete, None when it needs more bytes, or raises ProtocolError. Whatever it leaves
# in the buffer belongs to the next (pipelined) request.


# A body is handed over as the bytearray it was read into: one copy of it, never two. received
# says how many body bytes have arrived so far: the server holds those against its in-flight
# budget and measures the body's pace by them. Never what the framing announces: announcing
# 32 MiB costs a client nothing, and would reserve the budget for a body that never comes.


class BodyReader(Protocol):
    def read(self, buf: bytearray) -> bytes | bytearray | None: ...

    @property
    def received(self) -> int: ...


class NoBodyReader:
    """No Content-Length, no Transfer-Encoding: a request has no body (RFC 9112 §6.3)."""

    received = 0

    def read(self, buf: bytearray) -> bytes | None:
        return b""


class ContentLengthReader:
    def __init__(self, length: int):
        self._remaining = length
        self._body = bytearray()

    @property
    def received(self) -> int:
        return len(self._body)

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
    def received(self) -> int:
        return len(self._body)

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
