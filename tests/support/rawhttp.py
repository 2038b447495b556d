"""A minimal raw-socket HTTP/1.1 client for wire-level tests: bytes out, parsed responses back."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass

from sse import sse_data

# How long a response without a body is watched for stray bytes after its head.
NO_BODY_GRACE = 0.2


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class RawConnection:
    def __init__(self, port: int, timeout: float = 10.0, source: str | None = None):
        # source: another loopback address (127.0.0.2, ...) to connect from, as another machine would
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0) if source else None)
        self.timeout = timeout
        self.buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self) -> bool:
        data = self.sock.recv(65536)
        if not data:
            return False
        self.buffer += data
        return True

    def read_until(self, marker: bytes) -> bytes:
        """Raw bytes up to and past marker (a stream's head and comments, unparsed); fails if the server closes first."""
        received = b""
        while marker not in received:
            chunk = self.sock.recv(4096)
            assert chunk, received
            received += chunk
        return received

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError("closed mid-line")
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not self._fill():
                raise ConnectionError("closed mid-body")
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_response(self, head_request: bool = False, last: bool = False) -> RawResponse:
        """The next response; last: no request follows it on this connection (see _expect_nothing_more)."""
        status_line = self._line()
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = self._line()
            if not line:
                break
            name, value = line.decode("latin-1").split(":", 1)
            headers[name.strip().lower()] = value.strip()
        if status == 100:
            return RawResponse(status, headers, b"")
        if head_request or status in (204, 304):
            self._expect_nothing_more(status, last)
            return RawResponse(status, headers, b"")
        if headers.get("transfer-encoding") == "chunked":
            body = b""
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():
                        pass
                    break
                body += self._exact(size)
                self._exact(2)
            return RawResponse(status, headers, body)
        if "content-length" in headers:
            return RawResponse(status, headers, self._exact(int(headers["content-length"])))
        while self._fill():
            pass
        body, self.buffer = self.buffer, b""
        return RawResponse(status, headers, body)

    def _expect_nothing_more(self, status: int, last: bool = False) -> None:
        """A response without a body (HEAD, 204, 304) ends at its blank line: what follows on the
        connection can only be the next response (to a pipelined request).

        Bytes that came with the head are in the buffer already. When no request follows (last),
        this side closes its half of the connection, so the server, done with the response, reads
        EOF and closes too: every byte it wrote after the head is read here, however late (no
        fixed wait). Otherwise bytes written a little later show up within NO_BODY_GRACE. A body
        sent anyway would be read as the next response.
        """
        if last:
            self.sock.shutdown(socket.SHUT_WR)
            while self._fill():
                pass
        elif not self.buffer:
            self.sock.settimeout(NO_BODY_GRACE)
            try:
                self._fill()
            except socket.timeout:
                pass
            finally:
                self.sock.settimeout(self.timeout)
        if self.buffer and not self.buffer.startswith(b"HTTP/1."[:len(self.buffer)]):
            raise AssertionError(f"a {status} response with no body is followed by {len(self.buffer)} "
                                 f"stray bytes: {self.buffer[:80]!r}")

    def wait_for(self, marker: bytes) -> None:
        """Read until `marker` has arrived (a stream under way), keeping every byte for read_response."""
        while marker not in self.buffer:
            if not self._fill():
                raise ConnectionError(f"closed before {marker!r} came")

    def is_closed(self, timeout: float = 2.0) -> bool:
        """True when the server closed the connection (EOF) within timeout."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except socket.timeout:
            return False
        except OSError:
            return True

    def close(self) -> None:
        self.sock.close()


def request(port: int, data: bytes, timeout: float = 10.0) -> RawResponse:
    conn = RawConnection(port, timeout)
    try:
        conn.send(data)
        return conn.read_response(head_request=data.startswith(b"HEAD "), last=True)
    finally:
        conn.close()


def request_id_of(received: bytes) -> str:
    """The request-id header of a response whose head is at the start of received."""
    head = received.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    for line in head.split("\r\n")[1:]:
        name, value = line.split(":", 1)
        if name.strip().lower() == "request-id":
            return value.strip()
    raise AssertionError(f"no request-id header in {head!r}")


def post_json(path: str, body: dict | bytes, headers: str = "") -> bytes:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n{headers}\r\n").encode() + payload


def chat_text(resp: RawResponse) -> str:
    """The assistant's text in a chat completion, whole or streamed (SSE)."""
    if not (resp.header("content-type") or "").startswith("text/event-stream"):
        return resp.json()["choices"][0]["message"]["content"]
    text = ""
    for chunk in sse_data(resp.body):
        if chunk["choices"]:
            text += chunk["choices"][0]["delta"].get("content") or ""
    return text


def run_concurrently(fn, args_list: list[tuple], timeout: float = 120.0) -> list:
    """fn(*args) for each args, each on a thread of its own, all at once; the results in order."""
    results = [None] * len(args_list)

    def run(i, args):
        results[i] = fn(*args)

    threads = [threading.Thread(target=run, args=(i, a)) for i, a in enumerate(args_list)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return results
