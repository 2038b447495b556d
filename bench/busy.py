"""A busy machine for `make bench`: single-stream decode, quiet and with one other process keeping a
core busy, for the bare loop, localserve and llama-server, in one run.

A user's machine always runs something else. The other process here is a spinner (a Python
loop that never sleeps, one core's worth). Each round measures every contender quiet, then
with the spinner running, in an order that turns from round to round; the loaded figure is
paired with the quiet one taken just before it. After the spinner stops, each server decodes
one unmeasured answer of SETTLE_TOKENS, so the next quiet figure is a quiet server's:
localserve tries its full thread count again within thread_policy.MAX_GAP steps of the load
going (the time that takes is the cost of its adaptation, shown apart as recovery).

localserve runs in its default configuration for threads (all cores, fewer while other
processes hold some: no --threads, which would pin the count), with --speculative off as the
other two have no speculation; llama-server and the bare loop get --threads.

The guard: localserve keeps at least KEEP of its quiet speed loaded and at least GUARD x
llama-server's loaded speed (when llama-server is there); else `make bench` exits non-zero.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import sys
import time
from typing import Callable

from . import table
from .client import stream_completion
from .server import LlamaServer, RunningServer

KEEP = 0.5                  # localserve loaded / quiet
GUARD = 0.95                # localserve loaded / llama-server loaded (target 1.0; the margin is noise)
SETTLE_TOKENS = 160         # one answer after the load goes: a server may first find its threads again
SPINNER_START = 0.3         # seconds the spinner runs before a loaded figure is taken


class Spinner:
    """Another process keeping one core busy while inside `with`."""

    def __enter__(self) -> "Spinner":
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        time.sleep(SPINNER_START)
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


def run(model: str, engine, work, args) -> bool:
    """Measure, print the table; False when localserve misses the guard."""
    ban = {str(t): -100 for t in work.ban}
    body = {"max_tokens": args.tokens, "temperature": 0, "logit_bias": ban}
    contenders: dict[str, Callable[[list[int]], float]] = {
        "bare engine": lambda prompt: engine.run(prompt, args.tokens)[1]}
    servers = {"localserve": RunningServer(model, "--ctx-size", str(args.ctx_size), "--slots", "4", "--no-store",
                                           "--speculative", "off")}
    if LlamaServer.available():
        servers["llama-server"] = LlamaServer(model, args.threads, args.ctx_size, slots=4)
    with contextlib.ExitStack() as running:
        for name, server in servers.items():
            running.enter_context(server)
            stream_completion(server.port, {**body, "prompt": work.prompt, "max_tokens": 8})       # warm-up
            contenders[name] = _server_rate(server.port, body)
        engine.run(work.prompt, 8)
        figures = measure(contenders, work, args.repeat, settle={
            name: _settle(server.port, body) for name, server in servers.items()})
    print_table(figures, args)
    ours, theirs = figures["localserve"], figures.get("llama-server")
    failed = ours["kept"] < KEEP or (theirs is not None and ours["loaded"] < GUARD * theirs["loaded"])
    if failed:
        print(f"busy machine: localserve keeps {ours['kept']:.2f} of its quiet speed "
              f"(guard {KEEP}) or is under {GUARD} x llama-server loaded")
    return not failed


def _server_rate(port: int, body: dict) -> Callable[[list[int]], float]:
    return lambda prompt: stream_completion(port, {**body, "prompt": prompt}).decode_rate


def _settle(port: int, body: dict) -> Callable[[list[int]], float]:
    return lambda prompt: stream_completion(port, {**body, "prompt": prompt, "max_tokens": SETTLE_TOKENS}).decode_rate


def measure(contenders: dict[str, Callable[[list[int]], float]], work, rounds: int,
            settle: dict[str, Callable[[list[int]], float]]) -> dict[str, dict]:
    quiet: dict[str, list[float]] = {name: [] for name in contenders}
    loaded: dict[str, list[float]] = {name: [] for name in contenders}
    recovery: dict[str, list[float]] = {name: [] for name in settle}
    names = list(contenders)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            decode = contenders[name]
            quiet[name].append(decode(work.fresh(work.prompt)))
            with Spinner():
                loaded[name].append(decode(work.fresh(work.prompt)))
            if name in settle:
                recovery[name].append(settle[name](work.fresh(work.prompt)))
        print(f"busy machine, round {r + 1}: " + ", ".join(
            f"{name} {quiet[name][-1]:.1f} / {loaded[name][-1]:.1f}" for name in names), flush=True)
    return {name: {"quiet": statistics.median(quiet[name]), "loaded": statistics.median(loaded[name]),
                   "kept": statistics.median(b / a for a, b in zip(quiet[name], loaded[name])),
                   "recovery": statistics.median(recovery[name]) if recovery.get(name) else None}
            for name in names}


def print_table(figures: dict[str, dict], args) -> None:
    names = list(figures)
    ours = figures["localserve"]
    theirs = figures.get("llama-server")
    header = ("busy machine (1 core held by a spinner)", *names, "localserve", "target")
    rows = [
        ("decode tokens/s, quiet", *(f"{f['quiet']:.1f}" for f in figures.values()),
         f"{ours['quiet'] / theirs['quiet']:.2f} x llama-server" if theirs else "", ""),
        ("decode tokens/s, loaded", *(f"{f['loaded']:.1f}" for f in figures.values()),
         f"{ours['loaded'] / theirs['loaded']:.2f} x llama-server" if theirs else "", ">= 1.0 x llama-server"),
        ("loaded / quiet (paired)", *(f"{f['kept']:.2f}" for f in figures.values()), f"{ours['kept']:.2f}",
         f">= {KEEP}"),
        (f"decode tokens/s, first {SETTLE_TOKENS} after the load goes",
         *(f"{f['recovery']:.1f}" if f["recovery"] else "" for f in figures.values()), "", ""),
    ]
    table.print_table(header, rows, title=f"busy machine: {args.tokens} tokens per answer, median of {args.repeat} "
                                          f"rounds; localserve without --threads (adaptive), the others "
                                          f"--threads {args.threads}")
