"""--cpu-weights: which of llama.cpp's CPU buffer types hold the weights; AMX only when asked.

A tiny model with Q4_0 matrices is enough: llama.cpp's AMX buffer type takes them on a
CPU with AMX (and on such a Xeon crashes with them, as with the demo model's Q4_K), and
CPU_REPACK takes them on AVX2 and NEON.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import gguf
import numpy as np
import pytest

from conftest import ROOT, ServerProcess
from rawhttp import post_json, request
from tinymodel import write_tiny_gguf

from localserve.engine import cpu_weights
from localserve.cli.flags import build_parser, resolve_settings


@pytest.fixture(scope="module")
def q4_model(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("q4") / "tiny-q4_0.gguf",
                           weight_type=gguf.GGMLQuantizationType.Q4_0)


def offered() -> dict[str, int]:
    """The extra buffer types this CPU and llama.cpp build offer (AMX, CPU_REPACK, ...)."""
    import llama_cpp  # noqa: F401  (loads the ggml libraries)
    return cpu_weights.extra_buffer_types()


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localserve", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=60)


def model_meta(srv: ServerProcess) -> dict:
    return request(srv.port, b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n").json()["data"][0]["meta"]


# ---- the setting --------------------------------------------------------------------------------

def test_flag_environment_and_config_file(tmp_path):
    parser = build_parser()
    assert resolve_settings(parser.parse_args([]), {}).cpu_weights == "auto"
    config = tmp_path / "config.toml"
    config.write_text('cpu-weights = "plain"\n')
    from_file = parser.parse_args(["--config", str(config)])
    assert resolve_settings(from_file, {}).cpu_weights == "plain"
    assert resolve_settings(from_file, {"LOCALSERVE_CPU_WEIGHTS": "Repack"}).cpu_weights == "repack"
    flagged = parser.parse_args(["--config", str(config), "--cpu-weights", "amx"])
    assert resolve_settings(flagged, {"LOCALSERVE_CPU_WEIGHTS": "repack"}).cpu_weights == "amx"


def test_unknown_mode_is_exit_2_in_one_line(tmp_path, q4_model):
    from_env = run_cli("--model", str(q4_model), env={"LOCALSERVE_CPU_WEIGHTS": "fast"})
    assert from_env.returncode == 2
    assert from_env.stderr.strip().splitlines() == [
        "localserve: LOCALSERVE_CPU_WEIGHTS='fast': must be one of auto, repack, plain, amx"]
    config = tmp_path / "bad.toml"
    config.write_text('cpu_weights = "fast"\n')
    from_file = run_cli("--config", str(config))
    assert from_file.returncode == 2
    lines = from_file.stderr.strip().splitlines()
    assert len(lines) == 1 and "'cpu_weights'" in lines[0] and "auto, repack, plain, amx" in lines[0]
    from_flag = run_cli("--cpu-weights", "fast")
    assert from_flag.returncode == 2 and "--cpu-weights" in from_flag.stderr


# ---- the pieces ---------------------------------------------------------------------------------

def test_override_pattern_names_exactly_the_weights():
    names = ["blk.1.attn_output.weight", "blk.2.attn_output.weight", "blk.2.ffn_down.weight", "output.weight"]
    pattern = re.compile(cpu_weights.override_pattern(names))    # llama.cpp searches with std::regex
    for name in names:
        assert pattern.search(name)
    for other in ["blk.11.attn_output.weight", "blk.1.ffn_down.weight", "token_embd.weight",
                  "blk.1.attn_output.weight.extra", "output_norm.weight", "blk.1xattn_output.weight"]:
        assert not pattern.search(other), other


def test_buffer_sizes_from_the_load_log():
    log = ["load_tensors: loading model tensors, this can take a while... (load_mode = mmap)",
           "load_tensors:   CPU_Mapped model buffer size =   235.16 MiB",
           "load_tensors:   CPU_REPACK model buffer size =    12.66 MiB",
           "llama_kv_cache:        CPU KV buffer size =     1.50 MiB"]
    assert cpu_weights.buffer_sizes(log) == {"CPU": 235.16, "CPU_REPACK": 12.66}
    assert cpu_weights.describe({"CPU_REPACK": 12.66, "CPU": 235.16}) == "CPU_REPACK 13 MiB, CPU 235 MiB"


# ---- the layouts, on the real engine ------------------------------------------------------------

def test_layouts_hold_the_weights_where_they_say_and_agree_on_the_logits(q4_model):
    from localserve.engine.engine import Engine, quiet_llama_logs
    quiet_llama_logs()        # as the server does: the buffer sizes come from llama.cpp's load log
    bufts = offered()
    logits = {}
    for mode in ("plain", "repack"):    # auto runs in a server below, where choosing AMX crashes no test run

        engine = Engine(str(q4_model), n_ctx=256, n_seq=1, n_batch=32, threads=1, cpu_weights_mode=mode)
        try:
            assert "AMX" not in engine.weight_buffers, mode          # never unless asked
            tokens = engine.tokenize("The quick brown fox")
            engine.decode([(t, pos, 0, pos == len(tokens) - 1) for pos, t in enumerate(tokens)])
            logits[mode] = engine.logits(len(tokens) - 1).copy()
            if mode == "plain":
                assert set(engine.weight_buffers) == {"CPU"}
            elif "CPU_REPACK" in bufts:
                # every layer matrix (2 layers x q, k, v, output, gate, up, down) repacked
                assert "CPU_REPACK" in engine.weight_buffers and len(engine.weight_plan.repack) == 14
        finally:
            engine.close()
    # repacked weights compute the same products (up to float rounding)
    assert np.allclose(logits["repack"], logits["plain"], atol=1e-3)


def test_auto_layout_on_this_cpu(q4_model):
    """auto keeps llama.cpp's own choice unless the CPU has AMX; then CPU_REPACK without AMX."""
    bufts = offered()
    chosen = cpu_weights.plan(str(q4_model), "auto")
    if "AMX" in bufts:
        assert chosen.layout == cpu_weights.NO_AMX and not chosen.use_extra_bufts
        assert "#20824" in chosen.why
    else:
        assert chosen.layout == cpu_weights.DEFAULT and chosen.use_extra_bufts and not chosen.repack


# ---- the server -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["auto", "repack"])
def test_server_says_where_the_weights_are_after_a_warm_up(q4_model, mode):
    srv = ServerProcess(q4_model, env={"LOCALSERVE_CPU_WEIGHTS": mode} if mode != "auto" else {})
    try:
        meta = model_meta(srv)
        assert meta["cpu_weights"] == mode
        assert "AMX" not in meta["weight_buffers_mib"]           # never unless asked
        bufts = offered()
        if "CPU_REPACK" in bufts and (mode == "repack" or "AMX" in bufts):
            assert meta["weight_buffers_mib"]["CPU_REPACK"] > 0   # AMX kept out, repacking kept
        log = srv.log
        weights_line = log.index("weights: ")
        assert f"--cpu-weights {mode}" in log[weights_line:] and "warm-up decode" in log[weights_line:]
        serving = log.index("serving ")
        assert weights_line < serving and "weights in CPU" in log[serving:]
    finally:
        srv.stop()


@pytest.mark.skipif("AMX" not in offered(), reason="this CPU or llama.cpp build has no AMX buffer type")
def test_amx_only_when_asked_and_any_crash_shows_before_ready(q4_model):
    """--cpu-weights amx puts the weights in AMX, logged as the user's choice. Where AMX's
    kernels crash on them (llama.cpp #20824), the warm-up decode crashes the start: /health
    never says ok, nor is a user's request ever taken."""
    srv = ServerProcess(q4_model, "--cpu-weights", "amx", wait=False)
    try:
        deadline = time.monotonic() + 60
        ready = False
        while time.monotonic() < deadline and srv.proc.poll() is None and not ready:
            try:
                ready = request(srv.port, b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").status == 200
            except OSError:
                time.sleep(0.05)
        if ready:       # AMX works here: then it holds the weights, and requests are answered
            assert model_meta(srv)["weight_buffers_mib"].get("AMX", 0) > 0
            assert re.search(r"WARNING localserve: weights: AMX .*as the user chose", srv.log)
            answer = request(srv.port, post_json("/v1/completions", {"prompt": "The quick brown fox", "max_tokens": 4}))
            assert answer.status == 200 and srv.proc.poll() is None
        else:
            assert srv.proc.wait(30) != 0
            assert "serving " not in srv.log
    finally:
        srv.stop()
