"""Start localserve as a subprocess for a benchmark, on a free port, and stop it after."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class RunningServer:
    def __init__(self, model: str, *args: str):
        self.port = free_port()
        self.cmd = [sys.executable, "-m", "localserve", "--model", model, "--port", str(self.port),
                    "--log-level", "warning", *args]

    def __enter__(self) -> "RunningServer":
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError("localserve did not start")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(30)

    def eog_tokens(self) -> list[int]:
        """End-of-generation token ids, from /tokenize of the vocabulary's EOG texts."""
        info = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/v1/models").read())
        return info["data"][0]["meta"].get("eog_tokens", [])
