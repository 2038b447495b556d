"""`make bench-builds`: llama.cpp built with OpenMP against ggml's own threadpool, in one run.

    python -m bench.builds [--model M.gguf] [--tokens 128] [--repeat 2] [--rounds 3] [--avx2]

Why it exists: an OpenMP (libgomp) build of llama.cpp decodes at about its one-thread speed
when llama_decode is called from a thread other than the process's main one, and localserve
decodes on a runtime thread; `make install` therefore builds with -DGGML_OPENMP=OFF. This bench
keeps that choice measured. For each build (this venv's, and an OpenMP one built once into
.cache/bench-builds with contrib/llama_wheel.py) and for 1, 2 and all cores it measures, in a
fresh process of that build:
- the bare engine's decode with its loop on the main thread and on a worker thread,
  prefill and 4 sequences decoded together (on a worker thread, as localserve runs them);
- localserve itself (greedy, --speculative off): single-stream decode and 4 streams at once.
--avx2 adds the same pair built for AVX2 only (-DGGML_NATIVE=OFF), for AVX-512 machines to
show the other kind of CPU. Each build not yet kept compiles once (several minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
from pathlib import Path

from . import table
from .demo import model_or_demo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "contrib"))
import llama_wheel  # noqa: E402

VENVS = ROOT / ".cache" / "bench-builds"
AVX2_ONLY = ("-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
             "-DGGML_BMI2=ON -DGGML_AVX512=OFF")
PROMPT = ("The history of computing is a story of people building tools to think with. "
          "From the abacus to the mechanical calculators of the seventeenth century, ") * 3


def variants(avx2: bool) -> dict[str, str]:
    """Label → CMAKE_ARGS of each build compared."""
    found = {"ggml threads": "-DGGML_RPC=ON -DGGML_OPENMP=OFF", "OpenMP": "-DGGML_RPC=ON -DGGML_OPENMP=ON"}
    if avx2:
        found["ggml threads, AVX2"] = f"-DGGML_RPC=ON -DGGML_OPENMP=OFF {AVX2_ONLY}"
        found["OpenMP, AVX2"] = f"-DGGML_RPC=ON -DGGML_OPENMP=ON {AVX2_ONLY}"
    return found


def venv_for(cmake_args: str) -> Path:
    """A venv holding the llama-cpp-python built with these options (built and kept on first use)."""
    key = llama_wheel.build_key(llama_wheel.pinned_version(), cmake_args)
    venv = VENVS / key
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", "orjson"], check=True)
    subprocess.run([str(python), str(ROOT / "contrib" / "llama_wheel.py"), "--venv", str(venv)], check=True,
                   env={**os.environ, "CMAKE_ARGS": cmake_args})
    return python


# ---- the probe: runs in a process of the build measured ---------------------------------------

def on_worker_thread(fn, *args):
    result = []
    worker = threading.Thread(target=lambda: result.append(fn(*args)))
    worker.start()
    worker.join()
    return result[0]


def probe(model: str, threads: int, tokens: int, repeat: int) -> dict:
    from localserve.engine import cpu_weights

    from .bare import BareEngine
    engine = BareEngine(model, n_ctx=2048, threads=threads, weights=cpu_weights.plan(model, "auto"))
    prompt = engine.tokenize(PROMPT)
    engine.run(prompt, 8)                                                  # warm-up
    main, worker = [], []
    for _ in range(repeat):                 # alternating, so a machine's drift hits both alike
        main.append(engine.run(prompt, tokens)[1])
        worker.append(on_worker_thread(engine.run, prompt, tokens))
    prompts = [[prompt[0], 100 + i] + prompt[1:] for i in range(4)]
    streams = [on_worker_thread(engine.aggregate, prompts, tokens) for _ in range(repeat)]
    ban = [int(t) for t in engine.ban]
    engine.close()
    from localserve.engine.build_info import read_build_info
    return {"decode_main": statistics.median(main), "decode_worker": statistics.median(r[1] for r in worker),
            "prefill_worker": statistics.median(r[0] for r in worker), "streams_4": statistics.median(streams),
            "cpu_threads": read_build_info().threads, "ban": ban}


# ---- the server under each build ---------------------------------------------------------------

def measure_server(python: Path, model: str, threads: int, tokens: int, repeat: int, ban: list[int]) -> dict:
    from .client import concurrent_streams, stream_completion
    from .server import RunningServer
    server = RunningServer(model, "--threads", str(threads), "--slots", "4", "--ctx-size", "2048",
                           "--speculative", "off", "--no-store", python=str(python),
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    with server:
        base = {"prompt": PROMPT, "max_tokens": tokens, "temperature": 0,
                "logit_bias": {str(t): -100 for t in ban}}          # no end of generation: every stream is whole
        stream_completion(server.port, {**base, "max_tokens": 8})
        singles = [stream_completion(server.port, dict(base)).decode_rate for _ in range(repeat)]
        rates = []
        for i in range(repeat):
            results, elapsed = concurrent_streams(server.port, base, [f"[{i}.{n}] {PROMPT}" for n in range(4)])
            rates.append(sum(r.completion_tokens for r in results) / elapsed)
    return {"server_decode": statistics.median(singles), "server_streams_4": statistics.median(rates)}


def run_probe(python: Path, model: str, threads: int, args) -> dict:
    out = subprocess.run([str(python), "-m", "bench.builds", "--probe", "--model", model, "--threads", str(threads),
                          "--tokens", str(args.tokens), "--repeat", str(args.repeat)],
                         check=True, capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


MEASURES = (("decode_main", "bare decode, main thread, tok/s"), ("decode_worker", "bare decode, worker thread, tok/s"),
            ("prefill_worker", "bare prefill, worker thread, ms"), ("streams_4", "bare 4 sequences, tok/s"),
            ("server_decode", "localserve decode, tok/s"), ("server_streams_4", "localserve 4 streams, tok/s"))


def print_table(figures: dict[tuple[str, int], dict], labels: list[str], thread_counts: list[int]) -> None:
    pairs = list(zip(labels[0::2], labels[1::2]))        # (ggml threads, OpenMP) for each instruction set
    header = ["measure", "threads", *labels, *(f"{a} / {b}" for a, b in pairs)]
    rows = []
    for key, text in MEASURES:
        for n in thread_counts:
            cells = []
            for label in labels:
                value = figures[(label, n)][key]
                cells.append(f"{value * 1000:.1f}" if key.startswith("prefill") else f"{value:.1f}")
            for a, b in pairs:
                ratio = figures[(a, n)][key] / figures[(b, n)][key]
                cells.append(f"{1 / ratio if key.startswith('prefill') else ratio:.2f} x")    # > 1: a is faster
            rows.append([text, str(n), *cells])
    table.print_table(header, rows)


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.builds")
    parser.add_argument("--model")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=2, help="runs of each measure in one round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over every build and thread count")
    parser.add_argument("--threads", type=int, default=0, help="(--probe) threads")
    parser.add_argument("--avx2", action="store_true", help="also compare builds for AVX2 only")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    model = model_or_demo(args.model)
    if model is None:
        return 2
    if args.probe:
        print(json.dumps(probe(model, args.threads, args.tokens, args.repeat)))
        return 0
    builds = {label: venv_for(cmake) for label, cmake in variants(args.avx2).items()}
    thread_counts = sorted({1, 2, os.cpu_count() or 2})
    rounds: dict[tuple[str, int], list[dict]] = {}
    # Each round measures every build at every thread count, the builds' order turning from round to
    # round: a machine's drift hits them alike. Figures are medians over rounds.
    for r in range(args.rounds):
        order = list(builds.items())[r % len(builds):] + list(builds.items())[:r % len(builds)]
        for n in thread_counts:
            for label, python in order:
                bare = run_probe(python, model, n, args)
                found = {**bare, **measure_server(python, model, n, args.tokens, args.repeat, bare["ban"])}
                rounds.setdefault((label, n), []).append(found)
                print(f"round {r + 1}: {label}, {n} thread(s): "
                      + ", ".join(f"{k} {v:.3f}" for k, v in found.items() if isinstance(v, float)), flush=True)
    figures = {key: {name: statistics.median(f[name] for f in found) for name, _ in MEASURES}
               for key, found in rounds.items()}
    print_table(figures, list(builds), thread_counts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
