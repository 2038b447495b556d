"""Start a server under test as a subprocess on a free port; stop it afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Subprocess:
    cmd: list[str]
    env: dict[str, str] | None = None
    ready_path = "/health"

    def __enter__(self):
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=self.env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{self.ready_path}", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.1)
        self.proc.kill()
        raise RuntimeError(f"{self.cmd[0]} did not start")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(30)

    def peak_rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return 0.0


class RunningServer(_Subprocess):
    """localserve, by default under this interpreter; `python` and `env` run it under another
    venv's (bench/builds.py: another llama.cpp build, this checkout's code on PYTHONPATH)."""

    def __init__(self, model: str, *args: str, python: str = sys.executable, env: dict[str, str] | None = None):
        self.port = free_port()
        self.env = env
        self.cmd = [python, "-m", "localserve", "--model", model, "--port", str(self.port),
                    "--log-level", "warning", *args]


class LlamaServer(_Subprocess):
    """llama.cpp's own server, when on PATH or built by `make llama-server`, for a side-by-side figure."""

    BUILT = Path(__file__).resolve().parent.parent / ".cache" / "llama-server" / "build" / "bin" / "llama-server"

    @classmethod
    def path(cls) -> str | None:
        return shutil.which("llama-server") or (str(cls.BUILT) if cls.BUILT.is_file() else None)

    @classmethod
    def available(cls) -> bool:
        return cls.path() is not None

    def __init__(self, model: str, threads: int, ctx_size: int, slots: int, extra: tuple[str, ...] = ()):
        self.port = free_port()
        binary = self.path() or "llama-server"
        # its RUNPATH names the checkout it was built in: a worktree's shared .cache may outlive that one
        libs = str(Path(binary).resolve().parent)
        self.env = {**os.environ, "LD_LIBRARY_PATH": os.pathsep.join(
            filter(None, (libs, os.environ.get("LD_LIBRARY_PATH"))))}
        self.cmd = [binary, "-m", model, "--port", str(self.port), "-t", str(threads),
                    "-c", str(ctx_size * slots), "-np", str(slots), *extra]


class LlamaCppPythonServer(_Subprocess):
    """llama-cpp-python's own server (one request at a time), when its extras are installed.

    It takes only text prompts, so the bench sends it the same text instead of token ids.
    """
    ready_path = "/v1/models"
    text_prompts = True

    def __init__(self, model: str, threads: int, ctx_size: int):
        self.port = free_port()
        self.cmd = [sys.executable, "-m", "llama_cpp.server", "--model", model, "--port", str(self.port),
                    "--n_threads", str(threads), "--n_ctx", str(ctx_size)]

    @staticmethod
    def available() -> bool:
        import importlib.util
        return all(importlib.util.find_spec(name) is not None
                   for name in ("fastapi", "sse_starlette", "starlette", "uvicorn", "llama_cpp.server"))
