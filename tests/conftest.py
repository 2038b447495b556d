"""Shared fixtures: tiny real models and the real server in a subprocess."""

from __future__ import annotations

import compileall
import importlib.util
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# The helpers (tiny models, raw HTTP, SSE, SDK clients) live in tests/support/ and are imported by name.
sys.path.insert(0, str(Path(__file__).parent / "support"))

from browser import Browser, find_browser
from clients import openai_sdk
from needs import check_skip, missing
from tinymodel import CHATML_TEMPLATE, write_tiny_gguf  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 60.0
READY_POLL = 0.01    # seconds between /health probes: a tiny model loads in ~30 ms, and every test server waits

# Every server a test starts finds no models in the tester's own Ollama, Hugging Face, LM Studio or
# llama.cpp stores (models/discovery/): what it lists must not depend on the machine. The tests of
# discovery and pulls build their stores in a temporary home and turn it back on there.
os.environ["LOCALSERVE_NO_DISCOVER"] = "1"

# Property tests draw the same examples on every run: CI has one try, and a failure must not hang
# on the run's seed (HYPOTHESIS_PROFILE=explore draws new ones, to search). Neither a per-example
# deadline nor the too-slow check: both measure wall time, which a loaded 2-core box stretches.
settings.register_profile("ci", derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_sessionstart(session):
    """Byte-compile the package once: each test server is a new interpreter, and where
    PYTHONDONTWRITEBYTECODE is set (some CI images, sandboxes) every one of them compiled every
    module again (about half a second per start, a few hundred starts per run)."""
    compileall.compile_dir(str(ROOT / "localserve"), quiet=1)


def free_port() -> int:
    """A port free now, which another process may take before it is bound: only for programs
    that cannot bind port 0 and say which port they got (`localserve worker`, llama.cpp's RPC
    server). localserve itself takes ``--port 0`` (ServerProcess, listening_port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The server's line naming the address it bound (`--port 0`), and the --ollama-listen one's.
_LISTENING = re.compile(r"localserve: listening on http://\S+:(\d+)( \(--ollama-listen\))?$")


def listening_port(lines: list[str], ollama_listen: bool = False) -> int | None:
    """The port a server's log says it bound (its main address, or its --ollama-listen one)."""
    for line in list(lines):
        found = _LISTENING.search(line.rstrip("\n"))
        if found and bool(found.group(2)) == ollama_listen:
            return int(found.group(1))
    return None


class ServerProcess:
    """The real localserve, started as `python -m localserve --port 0`: it binds a free port and
    names it (no other process can take the port between a probe and the bind)."""

    def __init__(self, model: str | None, *args: str, env: dict | None = None, wait: bool = True,
                 threads: int | None = 1):
        self._port: int | None = None
        cmd = [sys.executable, "-m", "localserve", "--port", "0"]
        if threads is not None:     # None: the default, all cores and fewer under load (engine/thread_policy.py)
            cmd += ["--threads", str(threads)]
        if model:
            cmd += ["--model", str(model)]
        cmd += list(args)
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read_output, daemon=True)
        self._reader.start()
        if wait:
            self.wait_ready()

    def _read_output(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def log(self) -> str:
        return "".join(self.lines)

    @property
    def port(self) -> int:
        """The port the server bound, from its log (waits for the line, which comes before any load)."""
        if self._port is None:
            self._port = self.wait_listening()
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_listening(self, timeout: float = START_TIMEOUT, ollama_listen: bool = False) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            port = listening_port(self.lines, ollama_listen)
            if port is not None:
                return port
            if self.proc.poll() is not None:
                self._reader.join(timeout=5)        # its last lines
                port = listening_port(self.lines, ollama_listen)
                if port is not None:
                    return port
                raise RuntimeError(f"server exited with {self.proc.returncode} before listening:\n{self.log}")
            time.sleep(0.01)
        raise RuntimeError(f"server named no port it listens on:\n{self.log}")

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                    if sock.recv(64).startswith(b"HTTP/1.1 200"):
                        return
            except OSError:
                pass
            time.sleep(READY_POLL)
        raise RuntimeError(f"server did not become ready:\n{self.log}")

    def wait_log(self, text: str, timeout: float = 10.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.log:
                return True
            time.sleep(0.05)
        return False

    def wait_cancelled(self, request_id: str, reason: str, timeout: float = 10.0) -> str | None:
        """The runtime's "cancelled job" line for the request with this request-id, once it names reason.

        Keyed by the request's own id, so a cancellation left over from an earlier test on the
        same server cannot satisfy it.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in list(self.lines):
                if "cancelled job" in line and f" {request_id}) " in line and reason in line:
                    return line
            time.sleep(0.05)
        return None

    def stop(self, sig: int | None = None) -> int:
        if self.proc.poll() is None:
            if sig is None:
                self.proc.terminate()
            else:
                self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=5)
        return self.proc.returncode


@pytest.fixture(scope="session")
def models_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("models")


TINY_MODEL_SPECIAL_TOKENS = ["<tool_call>", "</tool_call>", ("<think>", "user_defined"), ("</think>", "user_defined")]


@pytest.fixture(scope="session")
def tiny_model(models_dir) -> Path:
    """A ChatML tiny model with the tool and reasoning markers as special tokens."""
    return write_tiny_gguf(models_dir / "tiny-chatml.gguf", chat_template=CHATML_TEMPLATE,
                           special_tokens=TINY_MODEL_SPECIAL_TOKENS)


def slow_model(models_dir: Path) -> Path:
    """A random model a few MB large: seconds of prefill for a few thousand tokens, time to poll and cancel.
    It has FIM prefix, suffix and middle tokens (none of them ends generation), for /infill."""
    path = models_dir / "slow.gguf"
    if not path.exists():
        write_tiny_gguf(path, chat_template=CHATML_TEMPLATE, n_embd=256, n_layer=4, n_head=4, n_ff=512,
                        context_length=8192, fim="legacy")
    return path


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("data")
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--slots", "2",
                        env={"XDG_DATA_HOME": str(data_dir)})
    yield srv
    srv.stop()


@pytest.fixture
def openai_client(server):
    return openai_sdk(server)


@pytest.fixture(scope="session")
def chromium(tmp_path_factory):
    """One headless Chromium for every module that drives the built-in page (browser.py), started
    on first use: a module takes it with `chromium.lend(its_screenshots)` and parks it after."""
    check_skip("browser")
    found = find_browser()
    if found is None:
        missing("browser", "chromium or chromedriver is not installed")
    if importlib.util.find_spec("selenium") is None:
        missing("browser", "selenium is not installed")
    shared = Browser(*found, tmp_path_factory.mktemp("chromium-profile"), ROOT / "test-output" / "webui")
    yield shared
    shared.quit()


# The image and audio servers every module of those tests shares (one process each, for the session).
from media_server import audio_bare, audio_mmproj, audio_server, vision_bare, vision_mmproj, vision_server  # noqa: E402,F401
