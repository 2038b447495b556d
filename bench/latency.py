"""How fast the server answers while it is loaded or abused: the figures tests never assert.

tests/e2e/test_load.py checks that the server keeps answering under the same kinds of load; this
module measures how fast. Two scenes, each on a server of its own:
- /health under load: 200 open keep-alive connections asking /health and /v1/models now and
  then, and generations streaming on every slot with more queued, while a separate process
  (so this one's client threads add nothing to what is measured) asks /health every 20 ms;
- /health during slowloris: 60 connections dripping their request heads a byte at a time until
  --header-timeout cuts them off, while one client asks /health every 20 ms on a keep-alive
  connection.
Targets: median and 80th percentile under 50 ms under load; median under 50 ms and the slowest
under 1 s during slowloris.

Run alone with ``python -m bench.latency [--model PATH]``; ``make bench`` runs it after the
throughput table.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import socket
import statistics
import subprocess
import sys
import threading
import time

from pathlib import Path

from .demo import model_or_demo
from .server import RunningServer

HEALTH_TARGET_MS = 50.0
SLOWLORIS_MAX_TARGET_MS = 1000.0
KEEPALIVE_CONNECTIONS = 200
GENERATION_STREAMS = 8          # at once: every slot busy, the rest queued
GENERATION_TOKENS = 64
LOAD_SECONDS = 10.0
SLOW_CONNECTIONS = 60
SLOWLORIS_HEADER_TIMEOUT = 2      # --header-timeout: how long the slow connections are held
SLOWLORIS_SECONDS = 10.0          # at most; the scene ends when the server has cut them all off
PROBE_INTERVAL = 0.02
DRIP_EVERY = 5                    # probes per byte dripped on each slow connection (~10 bytes/s)
GET_HEALTH = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
GET_MODELS = b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n"
PROBE_TIMEOUT = 30.0              # seconds one /health probe may wait for its answer
REPO_ROOT = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.latency")
    parser.add_argument("--model", help="GGUF model (default: the demo model)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--ctx-size", type=int, default=4096)
    return parser.parse_args()


def _read_response(sock: socket.socket) -> bytes:
    """One whole response with a Content-Length body (what /health and /v1/models send)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    head, body = data.split(b"\r\n\r\n", 1)
    length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        body += chunk
    return head


def _stream_generation(port: int, tokens: int, stop: threading.Event) -> None:
    body = json.dumps({"prompt": "Once upon a time", "max_tokens": tokens, "stream": True}).encode()
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\n"
                             b"Content-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%b"
                             % (len(body), body))
                while sock.recv(65536):
                    pass
        except OSError:
            return                  # the server went away: the probe's failure reports it


def _keepalive_client(port: int, opened: threading.Barrier, stop: threading.Event) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(GET_HEALTH)
        _read_response(sock)
        opened.wait()
        n = 0
        while not stop.wait(0.3):
            sock.sendall(GET_HEALTH if n % 2 else GET_MODELS)
            _read_response(sock)
            n += 1


def health_under_load(model: str, args) -> list[float]:
    """/health round trips (ms) while 200 keep-alive clients and the generation streams run."""
    with RunningServer(model, "--threads", str(args.threads), "--ctx-size", str(args.ctx_size),
                       "--slots", "2", "--no-store") as server:
        stop = threading.Event()
        opened = threading.Barrier(KEEPALIVE_CONNECTIONS + 1, timeout=60)
        threads = [threading.Thread(target=_keepalive_client, args=(server.port, opened, stop), daemon=True)
                   for _ in range(KEEPALIVE_CONNECTIONS)]
        for t in threads:
            t.start()
        opened.wait()
        streams = [threading.Thread(target=_stream_generation, args=(server.port, GENERATION_TOKENS, stop),
                                    daemon=True) for _ in range(GENERATION_STREAMS)]
        for t in streams:
            t.start()
        probe = subprocess.Popen([sys.executable, "-m", "bench.health_probe", str(server.port), str(PROBE_TIMEOUT)],
                                 cwd=REPO_ROOT, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
        time.sleep(LOAD_SECONDS)
        out, _ = probe.communicate("stop\n", timeout=60)
        stop.set()
        for t in threads + streams:
            t.join(120)
        if server.proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {server.proc.returncode} under load")
        if probe.returncode != 0:
            raise RuntimeError("the /health probe failed")
        return json.loads(out)


def health_during_slowloris(model: str, args) -> list[float]:
    """/health round trips (ms) on one connection while slow clients drip their heads."""
    with RunningServer(model, "--threads", str(args.threads), "--ctx-size", str(args.ctx_size),
                       "--header-timeout", str(SLOWLORIS_HEADER_TIMEOUT), "--no-store") as server:
        head = b"GET /health HTTP/1.1\r\nHost: localhost\r\nUser-Agent: slow\r\n\r\n"
        slow = {socket.create_connection(("127.0.0.1", server.port), timeout=5): 0 for _ in range(SLOW_CONNECTIONS)}
        normal = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        times = []
        started = time.monotonic()
        tick = 0
        while slow and time.monotonic() - started < SLOWLORIS_SECONDS:
            if tick % DRIP_EVERY == 0:        # a byte per slow connection every DRIP_EVERY probes
                for sock in list(slow):
                    try:
                        sock.send(head[slow[sock]:slow[sock] + 1])
                        slow[sock] += 1
                    except OSError:
                        del slow[sock]
                for sock in select.select(list(slow), [], [], 0)[0]:
                    del slow[sock]            # the server cut it off
            tick += 1
            t = time.perf_counter()
            normal.sendall(GET_HEALTH)
            _read_response(normal)
            times.append((time.perf_counter() - t) * 1000)
            time.sleep(PROBE_INTERVAL)
        for sock in slow:
            sock.close()
        normal.close()
        return times


def report(under_load: list[float], slowloris: list[float]) -> None:
    under_load, slowloris = sorted(under_load), sorted(slowloris)
    p80 = under_load[int(len(under_load) * 0.8)]
    rows = [
        ("/health under load, median ms", f"{statistics.median(under_load):.1f}", f"< {HEALTH_TARGET_MS:.0f}"),
        ("/health under load, 80th percentile ms", f"{p80:.1f}", f"< {HEALTH_TARGET_MS:.0f}"),
        ("/health under load, max ms", f"{under_load[-1]:.1f}", ""),
        ("/health during slowloris, median ms", f"{statistics.median(slowloris):.1f}", f"< {HEALTH_TARGET_MS:.0f}"),
        ("/health during slowloris, max ms", f"{slowloris[-1]:.1f}", f"< {SLOWLORIS_MAX_TARGET_MS:.0f}"),
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"latency ({len(under_load)} probes under load, {len(slowloris)} during slowloris)")
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def run(model: str, args) -> None:
    report(health_under_load(model, args), health_during_slowloris(model, args))


def main() -> int:
    args = parse_args()
    model = model_or_demo(args.model)
    if model is None:
        return 2
    run(model, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
