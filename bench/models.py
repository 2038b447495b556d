"""Several models: what loading on demand costs, against llama.cpp loading the same file.

- cold load: the time from a streamed request for an unloaded model to its first token,
  through the API (the manager's estimate, the engine's load, the chat template, the
  runtime thread, the prefill of a short prompt; a load again, so with the weight plan
  and warm-up its first load did: engine/file_facts.py), against the bare
  llama_model_load_from_file + llama_init_from_model of the same file with the same
  context and weight layout, in this process, the two alternating within each round;
  target <= 1.1x;
- switch: with --max-models 1 and two names for the model, requests alternating between
  them: each one unloads the other and loads its own before its first token.
The model's file sits in a folder of its own under two names (symlinks), so both loads read
the same pages: the figure is llama.cpp's work and ours, not the disk's.

Run alone with ``python -m bench.models [--model PATH]``; ``make bench`` runs it last.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from llama_cpp import llama_cpp as ll

from localserve.engine import cpu_weights

from .client import stream_completion
from .demo import model_or_demo
from .server import _Subprocess, free_port

LOAD_TARGET = 1.1
SLOTS = 4


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.models")
    parser.add_argument("--model", help="GGUF model (default: Gemma 3 270M)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--ctx-size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5, help="rounds per measurement (medians reported)")
    return parser.parse_args()


class CatalogueServer(_Subprocess):
    def __init__(self, models_dir: str, *args: str):
        self.port = free_port()
        self.cmd = [sys.executable, "-m", "localserve", "--models-dir", models_dir, "--port", str(self.port),
                    "--log-level", "warning", "--no-store", *args]


def bare_load(model: str, ctx_size: int, threads: int) -> float:
    """Seconds for llama.cpp alone to load the model and create the server's context."""
    ll.llama_backend_init()
    started = time.perf_counter()
    mparams = ll.llama_model_default_params()
    keep = cpu_weights.plan(model, "auto").apply(mparams)     # the layout the server chooses
    loaded = ll.llama_model_load_from_file(model.encode(), mparams)
    del keep
    params = ll.llama_context_default_params()
    params.n_ctx, params.n_seq_max, params.kv_unified = ctx_size * SLOTS, SLOTS, False
    params.n_batch = params.n_ubatch = 512
    params.swa_full, params.n_outputs_max, params.no_perf = False, SLOTS, True
    params.n_threads = params.n_threads_batch = threads
    ctx = ll.llama_init_from_model(loaded, params)
    seconds = time.perf_counter() - started
    if not loaded or not ctx:
        raise RuntimeError(f"llama.cpp could not load {model}")
    ll.llama_free(ctx)
    ll.llama_model_free(loaded)
    return seconds


def post(port: int, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=600) as response:
        return json.loads(response.read())


def first_token(port: int, name: str) -> float:
    """Seconds to the first token of a one-token request for `name`."""
    return stream_completion(port, {"model": name, "prompt": "The history of computing", "max_tokens": 1,
                                    "temperature": 0}).ttft


def measure(model: str, args) -> dict:
    silence = ll.llama_log_callback(lambda *_: None)
    ll.llama_log_set(silence, ctypes.c_void_p(0))
    with tempfile.TemporaryDirectory(prefix="bench-models-") as folder:
        for name in ("one", "two"):
            os.symlink(os.path.abspath(model), os.path.join(folder, f"{name}.gguf"))
        common = ("--threads", str(args.threads), "--ctx-size", str(args.ctx_size), "--slots", str(SLOTS),
                  "--keep-alive", "-1")
        cold, bare, ratios = [], [], []
        with CatalogueServer(folder, *common) as server:
            first_token(server.port, "one")          # the first load sets up what stays (backends, pools)
            for i in range(args.repeat):
                post(server.port, "/models/unload", {"model": "one"})
                if i % 2 == 0:
                    bare.append(bare_load(model, args.ctx_size, args.threads))
                cold.append(first_token(server.port, "one"))
                if i % 2 == 1:
                    bare.append(bare_load(model, args.ctx_size, args.threads))
                ratios.append(cold[-1] / bare[-1])
        switches = []
        with CatalogueServer(folder, *common, "--max-models", "1") as server:
            first_token(server.port, "one")
            for i in range(args.repeat * 2):
                switches.append(first_token(server.port, ("two", "one")[i % 2]))
    return {"cold": statistics.median(cold), "bare": statistics.median(bare), "ratio": statistics.median(ratios),
            "switch": statistics.median(switches)}


def run(model: str, args) -> dict:
    result = measure(model, args)
    print(f"models: cold load through the API {result['cold'] * 1000:.0f} ms to the first token, bare load + "
          f"context {result['bare'] * 1000:.0f} ms: {result['ratio']:.2f} x bare (target <= {LOAD_TARGET}); "
          f"switch with --max-models 1: {result['switch'] * 1000:.0f} ms "
          f"({result['switch'] / result['bare']:.2f} x a bare load)", flush=True)
    return result


def main() -> int:
    args = parse_args()
    model = model_or_demo(args.model)
    if model is None:
        return 2
    run(str(Path(model)), args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
