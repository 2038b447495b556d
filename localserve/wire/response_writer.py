"""One client's socket as the handlers see it: write a whole response or a stream.

The connection thread owns the socket; handlers and the stream pump write through a
ResponseWriter so the server can log status and bytes and knows whether the
connection may be reused. A failed write raises ClientGone: the caller cancels its job.

A response to HEAD is its head alone (RFC 9110 §9.3.2), whatever the handler writes:
every body byte, whole or streamed, passes through _write_body, which drops it.
"""

from __future__ import annotations

import errno
import select
import socket
import time

from ..errors import ClientGone
from .http import LAST_CHUNK, Request, format_chunk, format_head, format_response


class ResponseWriter:
    def __init__(self, sock: socket.socket, request: Request, *, server_header: str = "localserve",
                 extra_headers: list[tuple[str, str]] | None = None):
        self.sock = sock
        self.request = request
        self.server_header = server_header
        self.extra_headers = list(extra_headers or [])
        self.status: int | None = None
        self.bytes_sent = 0
        self.close_after = not request.keep_alive
        self.streaming = False
        self.finished = False
        self.head_only = request.method == "HEAD"

    @property
    def started(self) -> bool:
        return self.status is not None

    def _common_headers(self) -> list[tuple[str, str]]:
        headers = [("Server", self.server_header), ("Date", _http_date())]
        headers.extend(self.extra_headers)
        if self.close_after:
            headers.append(("Connection", "close"))
        elif self.request.version == "HTTP/1.0":
            headers.append(("Connection", "keep-alive"))
        return headers

    def send(self, status: int, body: bytes = b"", *, content_type: str | None = "application/json",
             headers: list[tuple[str, str]] | None = None) -> None:
        all_headers = self._common_headers()
        if content_type and (body or status not in (204, 304)):
            all_headers.append(("Content-Type", content_type))
        all_headers.extend(headers or [])
        self.status = status
        self._write_body(body, head=format_response(status, all_headers, body, head_only=True))
        self.finished = True

    def start_stream(self, status: int = 200, *, content_type: str = "text/event-stream",
                     headers: list[tuple[str, str]] | None = None) -> None:
        """Send the head of a streamed response. HTTP/1.0 clients get a close-delimited body."""
        all_headers = self._common_headers()
        all_headers += [("Content-Type", content_type), ("Cache-Control", "no-cache"),
                        ("X-Accel-Buffering", "no")]
        all_headers.extend(headers or [])
        if self.request.version == "HTTP/1.0":
            self.close_after = True
            all_headers = [h for h in all_headers if h[0] != "Connection"] + [("Connection", "close")]
        else:
            all_headers.append(("Transfer-Encoding", "chunked"))
        self.status = status
        self.streaming = True
        self._write(format_head(status, all_headers))

    def stream(self, data: bytes) -> None:
        if not data:
            return
        self._write_body(data if self.request.version == "HTTP/1.0" else format_chunk(data))

    def end_stream(self) -> None:
        if self.request.version != "HTTP/1.0":
            self._write_body(LAST_CHUNK)
        self.finished = True

    def peer_host(self) -> str:
        """The client's address without its port ("" for a Unix socket, or a socket already gone):
        what tells one machine's clients from another's."""
        try:
            peer = self.sock.getpeername()
        except OSError:
            return ""
        return peer[0] if isinstance(peer, tuple) else ""

    def peer_closed(self) -> bool:
        """True when the client has gone away (EOF or reset) while we wait for a result."""
        # poll first: a socket with a timeout would otherwise wait in recv. (Not select():
        # with over 1,024 connections open a descriptor is past FD_SETSIZE and select raises.)
        try:
            poller = select.poll()
            poller.register(self.sock, select.POLLIN)
            if not poller.poll(0):
                return False
            data = self.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return False
        except (OSError, ValueError):
            return True
        return data == b""

    def _write_body(self, data: bytes, *, head: bytes = b"") -> None:
        """Body bytes (after a head, in one write); to a HEAD request only the head goes out."""
        data = head if self.head_only else head + data
        if data:
            self._write(data)

    def _write(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.close_after = True
            raise ClientGone(errno.errorcode.get(exc.errno or 0, str(exc))) from exc
        self.bytes_sent += len(data)


def _http_date() -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime())
