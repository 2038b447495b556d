"""Listener, accept loop and one thread per connection; drain on shutdown.

The connection thread reads requests with http.RequestReader, hands each to the
router, and keeps the connection alive between requests. Two clocks guard it: a
request head must arrive within header_timeout of its first byte (of the accept,
for a connection's first request: a socket that sends nothing is closed then), and
an idle keep-alive connection is closed after idle_timeout.

Request bodies are held against one ByteBudget (--max-inflight-bytes) as their
bytes arrive until the answer is written; past it a request gets a 503. A body
must arrive within idle_timeout and, after a short grace, at MIN_BODY_BYTES_PER_SECOND
on average, or it gets a 408 and the connection closes: a body dripped a byte at a
time holds neither the budget nor a thread for long. An error answer to a client
that may still be sending ends with a lingering close (linger.py), so the client
reads the answer instead of a reset.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
import uuid
from typing import Callable

from ..ops import memory
from .budget import ByteBudget, Held
from .response_writer import ResponseWriter
from ..dialects.openai.errors import OPENAI_ERRORS
from ..errors import ApiError, ClientGone, ErrorShape
from .http import CONTINUE_RESPONSE, Limits, ProtocolError, Request, RequestReader, format_response
from .linger import Lingerer, linger_close
from ..ops.metrics import ServerMetrics
from ..settings import RETRY_AFTER_SECONDS, default_inflight_bytes
from ..ops.memory import TRIM_AFTER_BYTES

MIN_BODY_BYTES_PER_SECOND = 16 * 1024  # a request body slower than this (after the grace) is cut off with a 408
BODY_RATE_GRACE_SECONDS = 2.0      # how long a body may arrive at any pace before the rate counts

log = logging.getLogger("localserve.server")
access_log = logging.getLogger("localserve.access")

RECV_SIZE = 65536
LISTEN_BACKLOG = 512
PORT = re.compile(r"[0-9]{1,5}")      # ASCII digits: int() reads other scripts' digits too


class _Timeout(Exception):
    pass


class _Refused(Exception):
    """A request answered from its head alone (it waited for 100 Continue)."""

    def __init__(self, error: ApiError, request: Request):
        super().__init__(error.message)
        self.error, self.request = error, request


class HTTPServer:
    def __init__(self, dispatch: Callable[[Request, ResponseWriter, str], None], *, limits: Limits,
                 header_timeout: float, idle_timeout: float, listener: socket.socket,
                 max_connections: int = 1024, max_inflight_bytes: int | None = None,
                 errors_for: Callable[[str | None], ErrorShape] = lambda path: OPENAI_ERRORS,
                 refusal_before_body: Callable[[Request], ApiError | None] = lambda request: None,
                 metrics: ServerMetrics | None = None):
        self.dispatch = dispatch
        self.errors_for = errors_for   # a path's error shape, for requests that never reach a route
        self.refusal_before_body = refusal_before_body    # asked before a 100 Continue goes out
        self.max_connections = max_connections
        self.inflight = ByteBudget(max_inflight_bytes or default_inflight_bytes(limits.max_body_bytes))
        self.lingerer = Lingerer()
        self.limits = limits
        self.header_timeout = header_timeout
        self.idle_timeout = idle_timeout
        self.metrics = metrics or ServerMetrics()      # where each answered request is counted
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
            try:
                self._take(sock, peer)
            except Exception:          # one connection's failure must never end the accept loop
                log.exception("could not take a new connection")
                with self._lock:
                    self._connections.pop(sock, None)
                _close(sock)

    def _take(self, sock: socket.socket, peer: tuple) -> None:
        """Give an accepted connection its thread, or a 503 when the server or the system has no room."""
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self._lock:
            full = len(self._connections) >= self.max_connections
            if not full:
                self._connections[sock] = False
        if full:
            self._refuse(sock, f"too many open connections (--max-connections {self.max_connections}); retry shortly")
            return
        thread = threading.Thread(target=self._serve_connection, args=(sock, peer), daemon=True,
                                  name=f"conn-{peer[1] if len(peer) > 1 else ''}")
        try:
            thread.start()
        except RuntimeError:           # the system's thread limit: refuse this one, keep accepting
            log.warning("no thread could be started for a new connection: answered 503")
            with self._lock:
                self._connections.pop(sock, None)
            self._refuse(sock, "the server cannot start a thread for another connection now; retry shortly")

    def _refuse(self, sock: socket.socket, reason: str) -> None:
        """A 503 and close, without a thread of its own."""
        sock.setblocking(False)      # a few hundred bytes into an empty send buffer: never waits
        self._send_protocol_error(sock, ProtocolError(503, reason, headers=[("Retry-After", str(RETRY_AFTER_SECONDS))]))
        self.lingerer.add(sock)

    def connection_count(self) -> int:
        with self._lock:
            return len(self._connections)

    def _set_busy(self, sock: socket.socket, busy: bool) -> None:
        with self._lock:
            if sock in self._connections:
                self._connections[sock] = busy

    def _serve_connection(self, sock: socket.socket, peer: tuple) -> None:
        reader = RequestReader(self.limits)
        held = Held(self.inflight, self.limits.max_body_bytes)
        # the first head is due header_timeout after the accept: silence is not an idle keep-alive
        first_head_deadline = time.monotonic() + self.header_timeout if self.header_timeout > 0 else None
        linger = False
        try:
            while not self.draining.is_set():
                try:
                    request = self._read_request(sock, reader, held, first_head_deadline)
                except _Timeout:
                    return
                except ProtocolError as exc:
                    self._send_protocol_error(sock, exc)
                    linger = True
                    return
                except _Refused as refused:
                    self._send_refusal(sock, refused.error, refused.request.path, refused.request.method)
                    linger = True
                    return
                first_head_deadline = None
                if request is None:
                    return
                self._set_busy(sock, True)
                try:
                    keep_alive = self._handle(sock, request)
                finally:
                    self._set_busy(sock, False)
                    del request             # the body and all made of it can go before the trim
                    if held.release() >= TRIM_AFTER_BYTES:
                        memory.release_free_memory()
                if not keep_alive:
                    return
        except OSError:
            pass
        finally:
            held.release()
            with self._lock:
                self._connections.pop(sock, None)
            if linger:
                linger_close(sock)
            else:
                _close(sock)

    def _read_request(self, sock: socket.socket, reader: RequestReader, held: Held,
                      head_deadline: float | None = None) -> Request | None:
        """The next request, None on a clean EOF between requests; raises _Timeout or ProtocolError."""
        body_started: float | None = None
        while True:
            request = reader.next_request()
            self._hold_body(held, reader, request)
            if request is not None:
                return request
            if reader.wants_continue():
                self._continue(sock, reader)
            slow_body = False
            if not reader.head_complete() and (reader.has_partial or head_deadline is not None) \
                    and self.header_timeout > 0:        # 0: no header clock
                head_deadline = head_deadline or time.monotonic() + self.header_timeout
                timeout = head_deadline - time.monotonic()
            elif reader.head_complete():
                body_started = body_started or time.monotonic()
                timeout, slow_body = self._body_wait(body_started, reader.body_received)
            else:
                timeout = self.idle_timeout
            if timeout <= 0:
                if slow_body:
                    self._body_too_slow(reader)
                raise _Timeout()
            sock.settimeout(timeout)
            try:
                data = sock.recv(RECV_SIZE)
            except socket.timeout:
                if slow_body:
                    self._body_too_slow(reader)
                raise _Timeout() from None
            except OSError:
                return None
            if not data:
                if reader.has_partial:
                    log.debug("client closed mid-request")
                return None
            reader.feed(data)

    def _continue(self, sock: socket.socket, reader: RequestReader) -> None:
        """100 Continue to a head that waits for it, unless its answer is known without the body:
        then that answer, and the connection closes (the body may still come: linger)."""
        request = reader.pending
        assert request is not None
        refusal = self.refusal_before_body(request)
        if refusal is not None:
            raise _Refused(refusal, request)
        sock.sendall(CONTINUE_RESPONSE)
        reader.mark_continue_sent()

    def _body_wait(self, started: float, received: int) -> tuple[float, bool]:
        """How long to wait for the body's next bytes, and whether running out of that time means
        the body is too slow (True) or past the idle timeout that bounds a whole body (False).
        The rate counts after a grace: received must stay >= MIN_BODY_BYTES_PER_SECOND x (elapsed - grace)."""
        now = time.monotonic()
        whole = started + self.idle_timeout - now
        if MIN_BODY_BYTES_PER_SECOND <= 0:
            return whole, False
        pace = started + BODY_RATE_GRACE_SECONDS + received / MIN_BODY_BYTES_PER_SECOND - now
        return (pace, True) if pace < whole else (whole, False)

    @staticmethod
    def _body_too_slow(reader: RequestReader) -> None:
        request = reader.pending
        error = ProtocolError(408, f"the request body arrived slower than {MIN_BODY_BYTES_PER_SECOND} bytes a "
                                   f"second: the connection is closed")
        if request is not None:
            error.path, error.method = request.path, request.method
        raise error

    def _hold_body(self, held: Held, reader: RequestReader, request: Request | None) -> None:
        """Hold the body bytes that have arrived against the in-flight budget, or a 503."""
        needed = len(request.body) if request is not None else reader.body_received
        if held.grow_to(needed):
            return
        error = ProtocolError(503, f"the server is handling {self.inflight.used} bytes of request bodies and "
                                   f"{needed} more would pass --max-inflight-bytes {self.inflight.limit}; "
                                   f"retry shortly", headers=[("Retry-After", str(RETRY_AFTER_SECONDS))])
        request = request or reader.pending
        error.path, error.method = request.path, request.method
        raise error

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
        self._send_refusal(sock, ApiError(exc.status, exc.message, headers=exc.headers), exc.path, exc.method)

    def _send_refusal(self, sock: socket.socket, error: ApiError, path: str | None, method: str | None) -> None:
        """An answer written by the server itself, in the shape of the path's dialect; the
        connection closes after it."""
        status, body = self.errors_for(path).render(error)
        request_id = "req_" + uuid.uuid4().hex[:24]
        headers = [("Content-Type", "application/json"), ("Connection", "close"),
                   ("request-id", request_id), ("x-request-id", request_id), *error.headers]
        try:
            if sock.getblocking():
                sock.settimeout(1.0)
            sock.sendall(format_response(status, headers, body, head_only=method == "HEAD"))
        except OSError:
            pass
        access_log.info("%s %s %d %d (%s)", method or "-", path or "-", status, len(body), error.message)
        self.metrics.record_request(path, method or "", status, None)

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


def listen_address(text: str, default_host: str) -> tuple[str, int]:
    """HOST:PORT, [IPv6]:PORT, :PORT or PORT (on default_host) → (host, port); ValueError names the problem.
    Port 0 is any free port (the "listening on" log line names the one bound)."""
    host, _, port = text.strip().rpartition(":")
    if not PORT.fullmatch(port) or int(port) >= 65536 or (host.startswith("[") and not host.endswith("]")):
        raise ValueError(f"'{text}' is not an address such as 127.0.0.1:11434 or :11434")
    return (listen_host(host) if host else default_host), int(port)


def listen_host(text: str) -> str:
    """A host a socket can bind: a name, an IPv4 address, an IPv6 one in brackets or not; ValueError
    for one bind() would raise TypeError over (a NUL, a name IDNA cannot encode) or that holds
    what no name does (spaces, control characters, a stray bracket)."""
    host = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    try:
        host.encode("idna")
        valid = bool(host) and not any(c.isspace() or not c.isprintable() or c in "[]" for c in host)
    except UnicodeError:
        valid = False
    if not valid:
        raise ValueError(f"{ascii(text)[:80]} is not a host to listen on: a name or an IP address (IPv6 in brackets)")
    return host


def http_url(host: str, port: int) -> str:
    """The URL of an address bound (an IPv6 one in brackets)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _close(sock: socket.socket) -> None:
    try:
        sock.close()
    except OSError:
        pass
