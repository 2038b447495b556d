"""make fuzz: a real server on a tiny model, and generated requests thrown at it until
FUZZ_SECONDS pass or FUZZ_REQUESTS are answered.

Requests come from fuzzgen.py (every endpoint, type-swapped and extreme fields, random JSON,
generated grammars and schemas); besides them some requests are raw bytes at the HTTP level
and some connections are dropped mid-request or mid-answer. Every answer must be a 2xx or a
4xx in the dialect's own shape (OpenAI's error object, Anthropic's on /v1/messages), a stream
must end properly, and nothing may be reset. The server is watched: if it dies, the requests
in flight are reported and a new one is started. At the end: requests tried, answers by
status, the server's RSS and thread count, and the exit status of a SIGTERM; violations go to
a JSON-lines file (one request each, replayable). Exit status 1 on any violation.

It lives beside the tests because it builds its model and its server with theirs
(support/tinymodel.py, conftest.ServerProcess); pytest does not collect it (no test_ prefix), and
`make test` does not run it.

    python tests/fuzz.py --seconds 300 --requests 100000 --clients 6 --seed 1
"""

from __future__ import annotations

import argparse
import collections
import http.client
import json
import os
import random
import re
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import ServerProcess  # noqa: E402
from fuzzgen import Gen, to_json  # noqa: E402
from tinymodel import CHATML_TEMPLATE, write_tiny_gguf  # noqa: E402
from tinyvision import write_tiny_mmproj  # noqa: E402

TIMEOUT = 60.0               # one answer; longer means the server stalled
RAW_SHARE = 0.04             # requests sent as raw bytes at the HTTP level
DROP_SHARE = 0.03            # connections dropped mid-request or mid-answer
RECENT = 3                   # requests per client reported with a death, besides those in flight
DEATH_GRACE = 5.0            # seconds a failed connection waits to see whether the server is dying
MAX_RSS_MB = int(os.environ.get("FUZZ_MAX_RSS_MB", 3000))   # past it: a violation, and a new server
CAUSE_LINES = re.compile(r"GGML_ASSERT|terminate called|what\(\)|Error|error:|Traceback|Fatal|abort", re.I)
STREAM_ENDS = {"/v1/chat/completions": b"data: [DONE]", "/v1/completions": b"data: [DONE]",
               "/v1/responses": b"event: response.", "/v1/messages": b"event: message_stop",
               "/completion": b'"stop":true', "/completions": b'"stop":true'}
# llama-server's own routes: its error shape, {"error": {"code": <the status>, "message", "type"}}
LLAMA_PATHS = ("/completion", "/completions", "/props", "/models", "/embedding", "/embeddings", "/reranking",
               "/v1/reranking", "/v1/chat/completions/input_tokens", "/v1/responses/input_tokens", "/slots/")
RAW_5XX = (501, 505)         # what HTTP itself answers to an unknown coding or version (RFC 9110 §15.6)
RAW_REQUESTS = [
    b"GET / HTTP/1.1\r\n\r\n", b"GET /health HTTP/1.1\r\nHost: localhost:80@evil.com\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: localhost:abc\r\n\r\n", b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET * HTTP/1.1\r\nHost: x\r\n\r\n", b"POST http://evil.com/tokenize HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"GET http://localhost/health HTTP/1.1\r\nHost: localhost\r\n\r\n", b"GET /health HTTP/9.9\r\n\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
    b"POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", b"GET /health HTTP/1.1\nHost: x\n\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\n Folded: y\r\n\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n",
    b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", b"GET /health HTTP/1.0\r\n\r\n",
    b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
    b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    # what a page on another site sends with fetch(url, {mode: "no-cors", method: "POST", body})
    b"POST /models/unload HTTP/1.1\r\nHost: localhost\r\nOrigin: https://evil.example\r\nSec-Fetch-Site: cross-site"
    b"\r\nContent-Type: text/plain;charset=UTF-8\r\nContent-Length: 17\r\n\r\n{\"model\": \"tiny\"}",
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\n"
    b"Content-Length: 3\r\n\r\na=b",
]


class Target:
    """The server under test; replaced by a new one if it dies."""

    def __init__(self, model: Path, data_dir: Path, extra: list[str]):
        self.model, self.data_dir, self.extra = model, data_dir, extra
        self.lock = threading.Lock()
        self.generation = 0
        self.server = self._start()

    def _start(self) -> ServerProcess:
        return ServerProcess(self.model, "--model-id", "tiny", "--data-dir", str(self.data_dir), "--slots", "4",
                             *self.extra)

    def restart(self, seen_generation: int) -> None:
        with self.lock:
            if self.generation == seen_generation:
                if self.server.proc.poll() is None:
                    self.server.proc.kill()
                    self.server.stop()
                self.server = self._start()
                self.generation += 1

    def cause(self) -> str:
        """The log lines that say why the server went (not the backtrace that follows them)."""
        lines = [line for line in self.server.log.splitlines()[-400:] if CAUSE_LINES.search(line)
                 and not line.startswith("#")]
        return "\n".join(lines[-12:])


class Tally:
    def __init__(self, out: Path):
        self.lock = threading.Lock()
        self.statuses: collections.Counter = collections.Counter()
        self.kinds: collections.Counter = collections.Counter()
        self.violations = 0
        self.violation_kinds: collections.Counter = collections.Counter()
        self.tried = 0
        self.out = out.open("w")

    def count(self, kind: str, status: int | str) -> None:
        with self.lock:
            self.tried += 1
            self.statuses[status] += 1
            self.kinds[kind] += 1

    def violation(self, what: str, method: str, path: str, body: bytes | None, detail: str,
                  context: bool = False) -> None:
        """One violation; context: a request recorded beside one (in flight when the server died)."""
        with self.lock:
            record = {"violation": what, "method": method, "path": path, "detail": detail[:2000],
                      "body": (body or b"")[:20000].decode("utf-8", "replace")}
            self.out.write(json.dumps(record) + "\n")
            self.out.flush()
            if context:
                return
            self.violations += 1
            self.violation_kinds[what.split(":")[0].split(" (")[0]] += 1
            if self.violations <= 20:
                print(f"VIOLATION {what}: {method} {path} {detail[:300]}\n  body: {(body or b'')[:300]!r}",
                      flush=True)


# ---- checking one answer -------------------------------------------------------------------------

def shape_problem(method: str, path: str, status: int, headers: http.client.HTTPMessage, data: bytes) -> str | None:
    """What is wrong with an answer, or None."""
    if status >= 500 or status < 200:
        return f"status {status}"
    if method == "HEAD" or status in (204, 304):
        return f"{len(data)} body bytes in a {method} {status}" if data else None
    kind = headers.get("content-type", "")
    if kind.startswith("text/event-stream"):
        return stream_problem(method, path, data) if status == 200 else "an error as a stream"
    if kind.startswith("application/x-ndjson") and path.startswith("/api/") and status == 200:
        try:                                   # Ollama streams by default
            lines = [json.loads(line) for line in data.splitlines() if line.strip()]
        except ValueError:
            return "an NDJSON line that is not JSON"
        return None if lines and lines[-1].get("done") is True else "an NDJSON stream without its done line"
    if not kind.startswith("application/json"):
        return None if path == "/metrics" and status == 200 else f"content-type {kind!r}"
    try:
        value = json.loads(data)
    except ValueError:
        return "a body that is not JSON"
    if status < 400:
        return None
    if path.startswith("/v1/messages"):
        ok = value.get("type") == "error" and isinstance(value.get("error", {}).get("message"), str) \
            and isinstance(value["error"].get("type"), str)
    elif path.split("?")[0] in LLAMA_PATHS or path.startswith("/slots/"):
        error = value.get("error") if isinstance(value, dict) else None
        ok = isinstance(error, dict) and isinstance(error.get("message"), str) and "type" in error \
            and error.get("code") == status
    elif path.startswith("/api/"):          # Ollama's: the message alone
        ok = isinstance(value, dict) and isinstance(value.get("error"), str)
    else:
        error = value.get("error") if isinstance(value, dict) else None
        ok = isinstance(error, dict) and isinstance(error.get("message"), str) and "type" in error \
            and "param" in error and "code" in error
    return None if ok else f"an error not in the dialect's shape: {data[:200]!r}"


def acted_when_refused(method: str, headers: dict[str, str], data: bytes | None, status: int) -> str | None:
    """A request the server must refuse that it acted on: one from another site's page (an Origin
    not the server's own, Sec-Fetch-Site: cross-site), or a body not declared JSON."""
    if method in ("GET", "HEAD", "OPTIONS") or not 200 <= status < 300:
        return None
    origin = headers.get("Origin")
    if origin is not None and origin != "http://localhost":          # Host is localhost: that is its own
        return f"a {status} to a request from origin {origin[:60]!r}"
    if origin is None and headers.get("Sec-Fetch-Site") == "cross-site":
        return f"a {status} to a cross-site request"
    media = headers.get("Content-Type", "").split(";")[0].strip().lower()
    if data and data.strip() and not (media == "application/json" or
                                      (media.startswith("application/") and media.endswith("+json"))):
        return f"a {status} to a body sent as {headers.get('Content-Type')!r}"
    return None


def stream_problem(method: str, path: str, data: bytes) -> str | None:
    if b"internal" in data and b"error" in data:
        return "an internal error in the stream"
    if method != "POST":
        return None         # a replay starting after the last event is rightly empty
    base = path.split("?")[0]
    end = STREAM_ENDS.get(base)
    if end is None or end in data:
        return None
    if base == "/v1/messages" and b"event: error" in data:
        return None
    if base in ("/completion", "/completions") and b'data: {"error":' in data:     # in-band, its last line
        return None
    return f"a stream that does not end properly: ...{data[-200:]!r}"


# ---- one client ------------------------------------------------------------------------------

class Client(threading.Thread):
    def __init__(self, index: int, target: Target, tally: Tally, gen: Gen, stop: threading.Event, budget: list[int]):
        super().__init__(name=f"client-{index}", daemon=True)
        self.target, self.tally, self.gen, self.stop, self.budget = target, tally, gen, stop, budget
        self.conn: http.client.HTTPConnection | None = None
        self.generation = -1
        self.current: tuple[str, str, bytes | None] | None = None
        self.recent: collections.deque = collections.deque(maxlen=RECENT)   # answered just before

    def run(self) -> None:
        while not self.stop.is_set():
            with self.tally.lock:
                if self.budget[0] <= 0:
                    return
                self.budget[0] -= 1
            roll = self.gen.r.random()
            if roll < RAW_SHARE:
                self.raw()
            elif roll < RAW_SHARE + DROP_SHARE:
                self.drop()
            else:
                self.one()
            if self.current is not None:
                self.recent.append(self.current)
            self.current = None

    def connection(self) -> http.client.HTTPConnection:
        if self.conn is None or self.generation != self.target.generation:
            self.generation = self.target.generation
            self.conn = http.client.HTTPConnection("127.0.0.1", self.target.server.port, timeout=TIMEOUT)
        return self.conn

    def one(self) -> None:
        method, path, body = self.gen.request()
        data = body if isinstance(body, bytes) or body is None else to_json(body)
        self.current = (method, path, data)
        generation = self.target.generation
        headers = {"Host": "localhost", **self.gen.headers(data is not None)}
        if path.startswith("/v1/messages"):
            headers["anthropic-version"] = "2023-06-01"
        try:
            conn = self.connection()
            conn.request(method, path, body=data, headers=headers)
            resp = conn.getresponse()
            answer = resp.read()
            if resp.will_close:
                conn.close()
        except (OSError, http.client.HTTPException) as exc:
            self.conn = None
            if not self.stop.is_set():
                self.failed(generation, method, path, data, exc)
            return
        self.tally.count("request", resp.status)
        problem = shape_problem(method, path, resp.status, resp.headers, answer) or \
            acted_when_refused(method, headers, data, resp.status)
        if problem:
            # a 503/529 with Retry-After is the server saying it is busy: still a 5xx, named apart
            kind = "overloaded" if resp.status in (503, 529) and resp.headers.get("retry-after") else "answer"
            self.tally.violation(kind, method, path, data, f"{problem}; answer: {answer[:500]!r}")
        elif 200 <= resp.status < 300 and method == "POST":
            self.remember(path, answer)

    def remember(self, path: str, answer: bytes) -> None:
        try:
            value = json.loads(answer)
        except ValueError:
            return
        if not isinstance(value, dict) or not isinstance(value.get("id"), str):
            return
        kind = {"response": "response", "conversation": "conversation"}.get(value.get("object", ""))
        if kind:
            pool = self.gen.ids[kind]
            pool.append(value["id"])
            del pool[:-50]
        for item in value.get("data", []) if isinstance(value.get("data"), list) else []:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                self.gen.ids["item"].append(item["id"])
                del self.gen.ids["item"][:-50]

    def failed(self, generation: int, method: str, path: str, data: bytes | None, exc: Exception) -> None:
        self.tally.count("request", type(exc).__name__)
        if self.server_gone(generation):
            return                  # the watcher reports a death, with every request in flight
        self.tally.violation("connection", method, path, data, f"{type(exc).__name__}: {exc}")

    def server_gone(self, generation: int) -> bool:
        """Whether the server died since `generation` began (then wait for the new one). A
        process that aborts takes a few seconds to go (ggml prints a backtrace through gdb),
        failing connections meanwhile: give it DEATH_GRACE seconds to show it is dying."""
        grace = time.monotonic() + DEATH_GRACE
        while self.target.generation == generation and self.target.server.proc.poll() is None:
            if time.monotonic() > grace:
                return False
            time.sleep(0.1)
        while self.target.generation == generation and not self.stop.is_set():
            time.sleep(0.1)
        return True

    def raw(self) -> None:
        data = self.gen.r.choice(RAW_REQUESTS)
        self.current = ("RAW", "", data)
        generation = self.target.generation
        try:
            with socket.create_connection(("127.0.0.1", self.target.server.port), timeout=TIMEOUT) as sock:
                sock.sendall(data)
                sock.shutdown(socket.SHUT_WR)
                answer = b""
                while chunk := sock.recv(65536):
                    answer += chunk
        except OSError as exc:
            self.tally.count("raw", type(exc).__name__)
            if not self.server_gone(generation):
                self.tally.violation("raw connection", "RAW", "", data, f"{type(exc).__name__}: {exc}")
            return
        status_line = answer.split(b"\r\n", 1)[0].split()
        status = int(status_line[1]) if len(status_line) > 1 and status_line[1].isdigit() else "no answer"
        self.tally.count("raw", status)
        if (status == "no answer" or status >= 500 and status not in RAW_5XX) and not self.server_gone(generation):
            self.tally.violation("raw answer", "RAW", "", data, f"answer: {answer[:300]!r}")

    def drop(self) -> None:
        """A request cut off mid-body, or a (streamed) answer abandoned after a few bytes."""
        method, path, body = self.gen.chat() if self.gen.chance(0.5) else self.gen.responses()
        body["stream"] = self.gen.chance(0.6)
        body["max_tokens" if "messages" in body else "max_output_tokens"] = 30
        data = to_json(body)
        self.current = ("DROP " + method, path, data)
        head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n\r\n").encode()
        try:
            with socket.create_connection(("127.0.0.1", self.target.server.port), timeout=TIMEOUT) as sock:
                if self.gen.chance(0.3):
                    sock.sendall(head + data[: len(data) // 2])
                else:
                    sock.sendall(head + data)
                    sock.recv(self.gen.r.choice([1, 100, 2000]))
                if self.gen.chance(0.5):    # a reset rather than a FIN
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        except OSError:
            pass
        self.tally.count("dropped", "dropped")


# ---- the run ---------------------------------------------------------------------------------

def proc_status(pid: int) -> dict[str, int]:
    found = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name in ("VmRSS", "VmHWM", "Threads"):
                    found[name] = int(value.split()[0])
    except OSError:
        pass
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("FUZZ_SECONDS", 300)))
    parser.add_argument("--requests", type=int, default=int(os.environ.get("FUZZ_REQUESTS", 100000)))
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("FUZZ_SEED", time.time())))
    parser.add_argument("--out", default=None, help="violations, one JSON line each (default: a temp file)")
    parser.add_argument("server_args", nargs="*", help="extra flags for the server (after --)")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="localserve-fuzz-"))
    out = Path(args.out) if args.out else work / "violations.jsonl"
    model = work / "fuzz.gguf"
    write_tiny_gguf(model, chat_template=CHATML_TEMPLATE,
                    special_tokens=["<tool_call>", "</tool_call>", ("<think>", "user_defined"),
                                    ("</think>", "user_defined")])
    print(f"fuzz: seed {args.seed}, up to {args.requests} requests or {args.seconds:.0f} s, "
          f"{args.clients} clients; violations to {out}", flush=True)
    mmproj = write_tiny_mmproj(work / "mmproj.gguf")        # images are decoded, not only read
    target = Target(model, work / "data", ["--mmproj", str(mmproj), *args.server_args])
    tally = Tally(out)
    stop = threading.Event()
    budget = [args.requests]
    ids: dict[str, list[str]] = {"response": [], "conversation": [], "item": []}
    clients = [Client(i, target, tally, Gen(random.Random(args.seed * 1000 + i), ids=ids), stop, budget)
               for i in range(args.clients)]
    started = time.monotonic()
    for client in clients:
        client.start()
    deadline = started + args.seconds
    next_report = started + 30
    while any(c.is_alive() for c in clients) and time.monotonic() < deadline:
        time.sleep(0.5)
        rss_mb = proc_status(target.server.proc.pid).get("VmRSS", 0) // 1024
        if target.server.proc.poll() is not None or rss_mb > MAX_RSS_MB:
            time.sleep(1)      # let the death (or the growth) show
            server = target.server
            if server.proc.poll() is not None:
                what = f"server died: exit status {server.proc.returncode}"
            else:
                what = f"server grew past {MAX_RSS_MB} MB (RSS {rss_mb} MB): stopped"
            if server.proc.poll() is not None or rss_mb > MAX_RSS_MB:
                tally.violation(what, "", "", None, f"log:\n{target.cause()}")
                for method, path, data in [c.current for c in clients if c.current]:
                    tally.violation("in flight then", method, path, data, "", context=True)
                for method, path, data in [r for c in clients for r in c.recent]:
                    tally.violation("answered just before", method, path, data, "", context=True)
                target.restart(target.generation)
        if time.monotonic() >= next_report:
            next_report += 30
            elapsed = time.monotonic() - started
            print(f"  {elapsed:5.0f} s: {tally.tried} requests, {tally.tried / elapsed:.0f}/s, "
                  f"{tally.violations} violations, server RSS {rss_mb} MB", flush=True)
    stop.set()
    for client in clients:
        client.join(TIMEOUT)
    elapsed = time.monotonic() - started
    server = target.server
    health = None
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.request("GET", "/health", headers={"Host": "localhost"})
        health = conn.getresponse().status
    except OSError as exc:
        health = type(exc).__name__
    status = proc_status(server.proc.pid)
    exit_status = server.stop(signal.SIGTERM)
    if exit_status != 0:
        tally.violation("exit status", "SIGTERM", "", None, f"{exit_status}; log:\n{target.cause()}\n"
                                                            f"{server.log[-1500:]}")
    if health != 200:
        tally.violation("health", "GET", "/health", None, f"{health} after the run")

    print(f"\nfuzz: {tally.tried} requests in {elapsed:.0f} s ({tally.tried / elapsed:.0f}/s), seed {args.seed}, "
          f"{target.generation} server restart(s)")
    print("  by kind:   " + ", ".join(f"{k} {n}" for k, n in sorted(tally.kinds.items())))
    print("  by status: " + ", ".join(f"{k} {n}" for k, n in sorted(tally.statuses.items(), key=str)))
    print(f"  server at the end: RSS {status.get('VmRSS', 0) // 1024} MB (peak {status.get('VmHWM', 0) // 1024} MB), "
          f"{status.get('Threads', '?')} threads; /health {health}; SIGTERM exit status {exit_status}")
    print(f"  violations: {tally.violations}" + (f" (see {out}): " if tally.violations else "")
          + ", ".join(f"{k} {n}" for k, n in tally.violation_kinds.most_common()))
    tally.out.close()
    return 1 if tally.violations else 0


if __name__ == "__main__":
    sys.exit(main())
