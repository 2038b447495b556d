"""Closing a socket so that the peer can read the last thing we wrote to it.

close() on a socket whose receive buffer still holds bytes makes the kernel answer with a RST,
and a RST makes the peer's kernel throw away whatever it had not yet handed to the client: the
503 or 413 we had just sent is lost and the client sees "connection reset". So an error answer
to a client that may still be sending ends with a lingering close: half-close (a FIN after our
answer), read and discard what still arrives until the peer closes too or LINGER_SECONDS pass,
then close.

linger_close() does it on the calling thread (a connection thread may wait). The accept loop
must not wait on anybody, so it hands refused sockets to a Lingerer: one thread and poll()
(not select(): past 1,024 open connections a descriptor is beyond select's FD_SETSIZE).
"""

from __future__ import annotations

import select
import socket
import threading
import time

LINGER_SECONDS = 2.0               # after an error answer, how long to read what the client still sends
MAX_LINGERING_SOCKETS = 256        # refused sockets lingered on at once by the accept loop's helper

DISCARD_SIZE = 65536
POLL_MS = 100


def half_close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def discard_pending(sock: socket.socket) -> bool:
    """Read and drop what the peer has sent so far; True once it has closed (or failed)."""
    try:
        while True:
            data = sock.recv(DISCARD_SIZE, socket.MSG_DONTWAIT)
            if not data:
                return True
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def readable(sock: socket.socket, timeout: float) -> bool:
    """Whether sock has bytes (or an EOF, or an error) to read within timeout seconds."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(0, timeout) * 1000))


def linger_close(sock: socket.socket, seconds: float = LINGER_SECONDS) -> None:
    half_close(sock)
    deadline = time.monotonic() + seconds
    try:
        while (left := deadline - time.monotonic()) > 0:
            if readable(sock, left) and discard_pending(sock):
                break
    except (OSError, ValueError):
        pass
    sock.close()


class Lingerer:
    """One thread that lingers on many sockets at once: at most MAX_LINGERING_SOCKETS, oldest
    closed first when more come (a flood of refusals must not grow without bound)."""

    def __init__(self, seconds: float = LINGER_SECONDS, limit: int = MAX_LINGERING_SOCKETS):
        self.seconds = seconds
        self.limit = limit
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._sockets: dict[socket.socket, float] = {}      # socket → when to close it anyway
        self._thread: threading.Thread | None = None

    def add(self, sock: socket.socket) -> None:
        half_close(sock)
        with self._lock:
            if len(self._sockets) >= self.limit:
                oldest = next(iter(self._sockets))
                del self._sockets[oldest]
                oldest.close()
            self._sockets[sock] = time.monotonic() + self.seconds
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="linger", daemon=True)
                self._thread.start()
        self._wake.set()

    def __len__(self) -> int:
        with self._lock:
            return len(self._sockets)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            poller = select.poll()
            with self._lock:
                by_fd = {sock.fileno(): sock for sock in self._sockets}
                if not by_fd:
                    self._wake.clear()
                    continue
            for fd in by_fd:
                poller.register(fd, select.POLLIN)
            ready = {fd for fd, _ in poller.poll(POLL_MS)}
            now = time.monotonic()
            with self._lock:
                for fd, sock in by_fd.items():
                    deadline = self._sockets.get(sock)
                    if deadline is None:        # closed meanwhile by add() to make room
                        continue
                    if (fd in ready and discard_pending(sock)) or now >= deadline:
                        del self._sockets[sock]
                        sock.close()
