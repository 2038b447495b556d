"""When the engine cannot go on, the process ends cleanly: a reason logged, clean-up run, exit status 3.

Each case runs in a subprocess so that its exit status can be checked (issue 15's defence in depth).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tinymodel import CHATML_TEMPLATE, write_tiny_gguf

ROOT = Path(__file__).resolve().parents[2]


def run_script(code: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_an_abort_inside_llama_cpp_exits_with_status_3_after_the_clean_up():
    """A real ggml_abort (a failed assertion in llama.cpp) ends the process with 3, not SIGABRT."""
    done = run_script("""
        import ctypes, logging
        logging.basicConfig(level=logging.INFO)
        from localserve.ops import fatal
        from localserve.engine import ggml_lib, rpc
        fatal.at_engine_failure(lambda: print("stored state closed", flush=True))
        rpc.watch_aborts()
        base = ggml_lib._open_loaded(ggml_lib._GGML_BASE_NAMES)
        base.ggml_abort(b"llama-grammar.cpp", 1455, b"fatal error")
        print("still running", flush=True)
    """)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "stored state closed" in done.stdout
    assert "still running" not in done.stdout
    assert "llama.cpp aborted (" in done.stderr and "fatal error" in done.stderr
    assert "exiting with status 3" in done.stderr


@pytest.mark.parametrize("fault,reason", [
    ('RuntimeError("device lost")', "the runtime thread failed (RuntimeError: device lost)"),
    ("DecodeError(-3)", "llama_decode failed 3 times in a row (status -3)"),
])
def test_a_runtime_that_keeps_failing_exits_with_status_3(tmp_path, fault, reason):
    """Steps that fail one after another leave no way to serve: exit 3 rather than hang every client.
    The fault is injected at the engine's decode call; everything else is the real runtime."""
    model = write_tiny_gguf(tmp_path / "m.gguf", chat_template=CHATML_TEMPLATE)
    done = run_script(f"""
        import logging, time
        logging.basicConfig(level=logging.INFO)
        from localserve.ops import fatal
        from localserve.engine.engine import DecodeError, Engine
        from localserve.generation import GenerationRequest
        from localserve.runtime.runtime import Runtime
        fatal.at_engine_failure(lambda: print("clean-up ran", flush=True))
        engine = Engine({str(model)!r}, n_ctx=256, n_seq=2, n_batch=64, threads=1)

        def broken(*args, **kwargs):
            raise {fault}

        engine.decode = broken
        runtime = Runtime(engine, slots=2, max_queue=8)
        runtime.start()
        for _ in range(5):
            try:
                runtime.submit(GenerationRequest(prompt_tokens=[1, 40, 41], max_tokens=4))
            except Exception as exc:
                print("submit refused:", exc, flush=True)
            time.sleep(0.2)
        time.sleep(5)
        print("still running", flush=True)
    """)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr[-2000:])
    assert "clean-up ran" in done.stdout and "still running" not in done.stdout
    assert reason in done.stderr


def test_an_app_takes_its_exit_clean_up_off_when_it_closes(tmp_path):
    """In-process: each App.load() registers a clean-up for an engine failure; its close() takes it off."""
    from localserve.app import App
    from localserve.cli.flags import build_parser, resolve_settings
    from localserve.ops import fatal

    model = write_tiny_gguf(tmp_path / "m.gguf", chat_template=CHATML_TEMPLATE)
    settings = resolve_settings(build_parser().parse_args(["--model", str(model), "--no-store", "--threads", "1"]),
                                environ={})
    before = len(fatal._cleanups)      # the clean-ups an exit would run (read here alone)
    for _ in range(3):
        app = App(settings)
        app.load()
        assert len(fatal._cleanups) == before + 1
        app.close()
        assert len(fatal._cleanups) == before


def test_every_exit_status_is_distinct_and_documented():
    from localserve.app import EXIT_LOAD_FAILED
    from localserve.cli.flags import EXIT_USAGE
    from localserve.engine.rpc_config import EXIT_WORKER_LOST
    from localserve.ops.fatal import EXIT_ENGINE_FAILED

    statuses = {"EXIT_LOAD_FAILED": EXIT_LOAD_FAILED, "EXIT_USAGE": EXIT_USAGE,
                "EXIT_ENGINE_FAILED": EXIT_ENGINE_FAILED, "EXIT_WORKER_LOST": EXIT_WORKER_LOST}
    assert len(set(statuses.values())) == len(statuses), statuses
    page = (ROOT / "docs" / "operations.rst").read_text()
    section = re.split(r"\n[^\n]+\n[=~-]{3,}\n", page.split("Exit status\n-----------\n", 1)[1], maxsplit=1)[0]
    rows = {line.split()[0]: line for line in section.splitlines() if line[:1].isdigit()}
    assert set(rows) == {str(status) for status in statuses.values()} | {"0"}, rows
