"""Listener, accept loop and one thread per connection; drain on shutdown.

The connection thread reads requests with http.RequestReader, hands each to the
router, and keeps the connection alive between requests. Two clocks guard it: a
request head must arrive within header_timeout of its first byte, and an idle
keep-alive connection is closed after idle_timeout.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
import uuid
from typing import Callable

import orjson

from .connection import ClientGone, ResponseWriter
from ..errors import ApiError, anthropic_error_body, anthropic_status, openai_error_body
from .http import CONTINUE_RESPONSE, Limits, ProtocolError, Request, RequestReader, format_response
from ..ops.metrics import ServerMetrics

log = logging.getLogger("localserve.server")
access_log = logging.getLogger("localserve.access")

RECV_SIZE = 65536
LISTEN_BACKLOG = 512


class _Timeout(Exception):
    pass


class HTTPServer:
    def __init__(self, dispatch: Callable[[Request, ResponseWriter, str], None], *, limits: Limits,
                 header_timeout: float, idle_timeout: float, listener: socket.socket,
                 max_connections: int = 1024):
        self.dispatch = dispatch
        self.max_connections = max_connections
        self.limits = limits
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.metrics = ServerMetrics()     # the app's own replaces it: ServerMetrics.watch_server
        self.listener = listener
        self.draining = threading.Event()
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, bool] = {}   # socket → busy with a request
        self._accept_thread: threading.Thread | None = None

    @staticmethod
    def listen(host: str, port: int) -> socket.socket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
        return sock

    @property
    def address(self) -> tuple[str, int]:
        return self.listener.getsockname()[:2]

    def start(self) -> None:
        self._accept_thread = threading.Thread(target=self._accept_loop, name="accept", daemon=True)
        self._accept_thread.start()

    def _accept_loop(self) -> None:
        while not self.draining.is_set():
            try:
                sock, peer = self.listener.accept()
            except OSError:
                if self.draining.is_set():
                    return
                time.sleep(0.05)   # EMFILE and friends: back off instead of spinning
                continue
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                full = len(self._connections) >= self.max_connections
                if not full:
                    self._connections[sock] = False
            if full:
                self._refuse(sock)
                continue
            threading.Thread(target=self._serve_connection, args=(sock, peer), daemon=True,
                             name=f"conn-{peer[1] if len(peer) > 1 else ''}").start()

    def _refuse(self, sock: socket.socket) -> None:
        """Over --max-connections: a 503 and close, without a thread of its own."""
        self._send_protocol_error(sock, ProtocolError(503, f"too many open connections "
                                                            f"(--max-connections {self.max_connections}); retry shortly"))
        _close(sock)

    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    def busy_count(self) -> int:
        with self._lock:
            return sum(self._connections.values())

    def _set_busy(self, sock: socket.socket, busy: bool) -> None:
        with self._lock:
            if sock in self._connections:
                self._connections[sock] = busy

    def _serve_connection(self, sock: socket.socket, peer: tuple) -> None:
        reader = RequestReader(self.limits)
        try:
            while not self.draining.is_set():
                try:
                    request = self._read_request(sock, reader)
                except _Timeout:
                    return
                except ProtocolError as exc:
                    self._send_protocol_error(sock, exc)
                    return
                if request is None:
                    return
                self._set_busy(sock, True)
                try:
                    if not self._handle(sock, request):
                        return
                finally:
                    self._set_busy(sock, False)
        except OSError:
            pass
        finally:
            with self._lock:
                self._connections.pop(sock, None)
            _close(sock)

    def _read_request(self, sock: socket.socket, reader: RequestReader) -> Request | None:
        """The next request, None on a clean EOF between requests; raises _Timeout or ProtocolError."""
        head_deadline: float | None = None
        body_deadline: float | None = None
        while True:
            request = reader.next_request()
            if request is not None:
                return request
            if reader.wants_continue():
                sock.sendall(CONTINUE_RESPONSE)
                reader.mark_continue_sent()
            if reader.has_partial and not reader.head_complete():
                head_deadline = head_deadline or time.monotonic() + self.header_timeout
                timeout = head_deadline - time.monotonic()
            elif reader.head_complete():
                # the whole body within one idle timeout: a body dripped a byte at a time
                # would otherwise hold the connection for ever
                body_deadline = body_deadline or time.monotonic() + self.idle_timeout
                timeout = body_deadline - time.monotonic()
            else:
                timeout = self.idle_timeout
            if timeout <= 0:
                raise _Timeout()
            sock.settimeout(timeout)
            try:
                data = sock.recv(RECV_SIZE)
            except socket.timeout:
                raise _Timeout() from None
            except OSError:
                return None
            if not data:
                if reader.has_partial:
                    log.debug("client closed mid-request")
                return None
            reader.feed(data)

    def _handle(self, sock: socket.socket, request: Request) -> bool:
        """Answer one request; True when the connection may serve another."""
        started = time.monotonic()
        request_id = "req_" + uuid.uuid4().hex[:24]
        writer = ResponseWriter(sock, request, extra_headers=[("request-id", request_id), ("x-request-id", request_id)])
        if self.draining.is_set():
            writer.close_after = True
        sock.settimeout(self.idle_timeout or None)
        try:
            self.dispatch(request, writer, request_id)
        except ClientGone:
            writer.close_after = True
        finally:
            elapsed = (time.monotonic() - started) * 1000
            access_log.info("%s %s %s %d %.1fms", request.method, request.target, writer.status or "-",
                            writer.bytes_sent, elapsed)
            self.metrics.record_request(request.path, request.method, writer.status, elapsed / 1000)
        return not writer.close_after and writer.finished and not self.draining.is_set()

    def _send_protocol_error(self, sock: socket.socket, exc: ProtocolError) -> None:
        error = ApiError(exc.status, exc.message)
        if exc.path is not None and exc.path.startswith("/v1/messages"):   # Anthropic clients read their shape
            status, body = anthropic_status(exc.status), orjson.dumps(anthropic_error_body(error))
        else:
            status, body = exc.status, orjson.dumps(openai_error_body(error))
        request_id = "req_" + uuid.uuid4().hex[:24]
        headers = [("Content-Type", "application/json"), ("Connection", "close"),
                   ("request-id", request_id), ("x-request-id", request_id)]
        try:
            sock.settimeout(1.0)
            sock.sendall(format_response(status, headers, body))
        except OSError:
            pass
        access_log.info("- - %d %d (%s)", status, len(body), exc.message)
        self.metrics.record_request(exc.path, "", status, None)

    def shutdown(self, drain_timeout: float) -> None:
        """Stop accepting, close idle connections, wait for busy ones up to drain_timeout."""
        self.draining.set()
        _close(self.listener)
        deadline = time.monotonic() + drain_timeout
        while True:
            with self._lock:
                idle = [s for s, busy in self._connections.items() if not busy]
                busy = sum(self._connections.values())
            for sock in idle:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            if busy == 0 or time.monotonic() >= deadline:
                return
            time.sleep(0.05)


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
