"""How the loaded llama.cpp was built: llama_print_system_info() read into features."""

from __future__ import annotations

from localserve.engine.build_info import parse_system_info, read_build_info

OPENMP_BUILD = ("CPU : SSE3 = 1 | AVX2 = 1 | AVX512 = 1 | OPENMP = 1 | LLAMAFILE = 1 | REPACK = 1 | "
                "CUDA : ARCHS = 890 | USE_GRAPHS = 1 | ")
GGML_THREADS_BUILD = "CPU : SSE3 = 1 | AVX2 = 1 | LLAMAFILE = 1 | REPACK = 1 | RPC : "


def test_an_openmp_build_is_the_slow_kind_and_says_how_to_rebuild():
    info = parse_system_info(OPENMP_BUILD)
    assert info.features["CPU"]["OPENMP"] == "1" and info.features["CUDA"]["ARCHS"] == "890"
    assert info.openmp and info.threads == "OpenMP"
    assert "GGML_OPENMP=OFF" in info.warning()
    assert info.describe() == "CPU threads: OpenMP; backends: CPU, CUDA"


def test_a_ggml_threadpool_build_gets_no_warning():
    info = parse_system_info(GGML_THREADS_BUILD)
    assert not info.openmp and info.warning() is None
    assert list(info.features) == ["CPU", "RPC"] and info.features["CPU"]["AVX2"] == "1"


def test_the_installed_build_uses_ggml_threads():
    """make install builds llama-cpp-python with -DGGML_OPENMP=OFF (contrib/llama_wheel.py): an
    OpenMP build left in the venv from before would decode at the one-thread speed."""
    info = read_build_info()
    assert "CPU" in info.features
    assert not info.openmp, info.warning()
