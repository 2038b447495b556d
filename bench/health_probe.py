"""Asks GET /health every 20 ms over one keep-alive connection until stdin closes (or 2,000
probes); prints the round trips in milliseconds as a JSON list. A probe unanswered within
TIMEOUT seconds fails it. Run as its own process (`python -m bench.health_probe PORT TIMEOUT`),
so the load generator's threads don't add their own waiting to what the server is asked.
Used by `make bench` (bench/latency.py) and by tests/e2e/test_load.py.
"""

import json
import select
import socket
import sys
import time

MAX_PROBES = 2000
INTERVAL = 0.02


def main(port: int, timeout: float) -> None:
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    times = []
    while not select.select([sys.stdin], [], [], INTERVAL)[0] and len(times) < MAX_PROBES:
        started = time.perf_counter()
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        data = b""
        while not data.endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                sys.exit("the server closed the probe's connection")
            data += chunk
        times.append((time.perf_counter() - started) * 1000)
    print(json.dumps(times))


if __name__ == "__main__":
    main(int(sys.argv[1]), float(sys.argv[2]))
