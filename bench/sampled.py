"""Sampled decoding in the default configuration for `make bench`: n-gram speculation on, against
the same server with --speculative off and against the bare loop, paired within each round.

The usual chat setting (temperature 0.8, top-p 0.95, top-k 40, min-p 0.05: decode.SAMPLED) on
the single-stream workload. Little of a sampled answer can be drafted; speculation must then
cost nothing (runtime/draft_budget.py). Each round runs the bare loop and the two servers on the
same fresh prompt, in an order that turns from round to round, SINGLE_PAIRS_PER_ROUND times.

The guard: the default under GUARD_OFF x --speculative off or GUARD_BARE x bare makes `make
bench` exit non-zero.
"""

from __future__ import annotations

import statistics

from . import table
from .client import stream_completion
from .decode import SAMPLED
from .measure import SINGLE_PAIRS_PER_ROUND
from .server import RunningServer

GUARD_OFF = 0.97
GUARD_BARE = 0.95


def run(model: str, engine, work, args) -> bool:
    common = ("--threads", str(args.threads), "--ctx-size", str(args.ctx_size), "--slots", "4", "--no-store")
    ban = {str(t): -100 for t in work.ban}
    body = {"max_tokens": args.tokens, "logit_bias": ban, **SAMPLED}
    with RunningServer(model, *common) as default, RunningServer(model, *common, "--speculative", "off") as off:
        for server in (default, off):
            stream_completion(server.port, {**body, "prompt": work.prompt, "max_tokens": 8})      # warm-up
        engine.run(work.prompt, 8, sampling=SAMPLED)
        sides = {"default": lambda prompt: _rate(default.port, body, prompt),
                 "speculation off": lambda prompt: _rate(off.port, body, prompt),
                 "bare": lambda prompt: engine.run(prompt, args.tokens, sampling=SAMPLED)[1]}
        rates: dict[str, list[float]] = {name: [] for name in sides}
        names = list(sides)
        for i in range(SINGLE_PAIRS_PER_ROUND * args.repeat):
            prompt = work.fresh(work.prompt)
            for name in names[i % len(names):] + names[:i % len(names)]:
                rates[name].append(sides[name](prompt))
    ratio_off = statistics.median(a / b for a, b in zip(rates["default"], rates["speculation off"]))
    ratio_bare = statistics.median(a / b for a, b in zip(rates["default"], rates["bare"]))
    rows = [("sampled decode tokens/s, 1 stream", *(f"{statistics.median(r):.1f}" for r in rates.values())),
            ("default / the other (paired)", "", f"{ratio_off:.3f} (>= {GUARD_OFF})", f"{ratio_bare:.3f} (>= {GUARD_BARE})")]
    table.print_table(("sampled, default configuration", "localserve default", "--speculative off", "bare engine"),
                      rows, title=f"sampled default: {args.tokens} tokens, {len(rates['bare'])} rounds, "
                                  f"--threads {args.threads}")
    failed = ratio_off < GUARD_OFF or ratio_bare < GUARD_BARE
    if failed:
        print(f"sampled default: {ratio_off:.3f} x --speculative off (guard {GUARD_OFF}), "
              f"{ratio_bare:.3f} x bare (guard {GUARD_BARE})")
    return not failed


def _rate(port: int, body: dict, prompt: list[int]) -> float:
    return stream_completion(port, {**body, "prompt": prompt}).decode_rate
