"""How fast the server answers while it is loaded or abused: the figures tests never assert.

tests/e2e/test_load.py checks that the server keeps answering under the same kinds of load; this
module measures how fast. Two scenes, each on a server of its own:
- /health under load: 200 open keep-alive connections asking /health and /v1/models now and
  then, and generations streaming on every slot with more queued, while a separate process
  (so this one's client threads add nothing to what is measured) asks /health every 20 ms;
- /health during slowloris: 60 connections dripping their request heads a byte at a time until
  --header-timeout cuts them off, while one client asks /health every 20 ms on a keep-alive
  connection;
- POST during slow bodies: four connections announce the largest body and drip it a byte every
  1.5 s (reconnecting when the server cuts them off), while one client POSTs /tokenize every
  20 ms; every answer must be a 200 (the budget once went to the four announced bodies: 503s).
Targets: median and 80th percentile under 50 ms under load; median under 50 ms and the slowest
under 1 s during slowloris; median under 50 ms and no refusal during slow bodies.

Run alone with ``python -m bench.latency [--model PATH] [--scene NAME ...] [--seconds S]``;
``make bench`` runs it after the throughput table.
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
SLOW_BODIES = 4                   # connections dripping a body
SLOW_BODY_DRIP_SECONDS = 1.5      # between the bytes each of them sends
SLOW_BODY_SECONDS = 10.0
DEFAULT_MAX_BODY = 32 * 1024 * 1024   # what each slow body announces: the server's default largest
SCENES = ("load", "slowloris", "slow-body")
REPO_ROOT = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.latency")
    parser.add_argument("--model", help="GGUF model (default: Gemma 3 270M)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--ctx-size", type=int, default=4096)
    parser.add_argument("--scene", action="append", choices=SCENES, help="run only this scene (repeatable)")
    parser.add_argument("--seconds", type=float, help="how long the load and slow-body scenes last "
                                                      f"(default {LOAD_SECONDS:.0f} and {SLOW_BODY_SECONDS:.0f})")
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
        time.sleep(getattr(args, "seconds", None) or LOAD_SECONDS)
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


def _drip_body(port: int, stop: threading.Event) -> None:
    """One slow body: announce the largest, send a byte every SLOW_BODY_DRIP_SECONDS; start again
    when the server cuts it off, as an attacker would."""
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % DEFAULT_MAX_BODY)
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(head)
                while not stop.wait(SLOW_BODY_DRIP_SECONDS):
                    sock.sendall(b" ")
                    if select.select([sock], [], [], 0)[0]:
                        break                 # the server answered (a 408) and closes: reconnect
        except OSError:
            stop.wait(0.1)


def post_during_slow_bodies(model: str, args) -> tuple[list[float], int]:
    """POST /tokenize round trips (ms) on one keep-alive connection while slow bodies drip, and how
    many of them were refused."""
    with RunningServer(model, "--threads", str(args.threads), "--ctx-size", str(args.ctx_size),
                       "--no-store") as server:
        stop = threading.Event()
        drippers = [threading.Thread(target=_drip_body, args=(server.port, stop), daemon=True)
                    for _ in range(SLOW_BODIES)]
        for t in drippers:
            t.start()
        time.sleep(1.0)                       # the slow bodies' heads are in
        body = b'{"content": "hello"}'
        post = (b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
        times, refused = [], 0
        bystander = socket.create_connection(("127.0.0.1", server.port), timeout=PROBE_TIMEOUT)
        started = time.monotonic()
        while time.monotonic() - started < (args.seconds or SLOW_BODY_SECONDS):
            t = time.perf_counter()
            try:
                bystander.sendall(post)
                head = _read_response(bystander)
            except OSError:                   # a refusal closes the connection
                bystander = socket.create_connection(("127.0.0.1", server.port), timeout=PROBE_TIMEOUT)
                refused += 1
                continue
            times.append((time.perf_counter() - t) * 1000)
            refused += not head.startswith(b"HTTP/1.1 200")
            time.sleep(PROBE_INTERVAL)
        bystander.close()
        stop.set()
        for t in drippers:
            t.join(10)
        return times, refused


def report(results: dict) -> None:
    rows = []
    if "load" in results:
        under_load = sorted(results["load"])
        p80 = under_load[int(len(under_load) * 0.8)]
        rows += [
            ("/health under load, median ms", f"{statistics.median(under_load):.1f}", f"< {HEALTH_TARGET_MS:.0f}"),
            ("/health under load, 80th percentile ms", f"{p80:.1f}", f"< {HEALTH_TARGET_MS:.0f}"),
            ("/health under load, max ms", f"{under_load[-1]:.1f}", ""),
        ]
    if "slowloris" in results:
        slowloris = sorted(results["slowloris"])
        rows += [
            ("/health during slowloris, median ms", f"{statistics.median(slowloris):.1f}", f"< {HEALTH_TARGET_MS:.0f}"),
            ("/health during slowloris, max ms", f"{slowloris[-1]:.1f}", f"< {SLOWLORIS_MAX_TARGET_MS:.0f}"),
        ]
    if "slow-body" in results:
        times, refused = results["slow-body"]
        times = sorted(times) or [float("nan")]
        rows += [
            ("POST during slow bodies, median ms", f"{statistics.median(times):.1f}", f"< {HEALTH_TARGET_MS:.0f}"),
            ("POST during slow bodies, max ms", f"{times[-1]:.1f}", ""),
            ("POST during slow bodies, refused", str(refused), "0"),
        ]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    counts = {"load": "under load", "slowloris": "during slowloris", "slow-body": "during slow bodies"}
    print("latency (" + ", ".join(f"{len(results[k] if k != 'slow-body' else results[k][0])} probes {v}"
                                  for k, v in counts.items() if k in results) + ")")
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def run(model: str, args) -> None:
    scenes = getattr(args, "scene", None) or SCENES
    results: dict = {}
    if "load" in scenes:
        results["load"] = health_under_load(model, args)
    if "slowloris" in scenes:
        results["slowloris"] = health_during_slowloris(model, args)
    if "slow-body" in scenes:
        results["slow-body"] = post_during_slow_bodies(model, args)
    report(results)


def main() -> int:
    args = parse_args()
    model = model_or_demo(args.model)
    if model is None:
        return 2
    run(model, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
