"""Decode speed of the weight layout localserve chooses, next to use_extra_bufts = False.

use_extra_bufts = False (weights in plain CPU memory, no repacking) is the layout that
works on every CPU; the layout `--cpu-weights auto` chooses (localserve/engine/cpu_weights.py)
should be at least as fast. Both are loaded side by side on the bare engine and decode
the same prompt in turn, alternating which goes first, so a shared machine's drift hits
both alike. AMX is never measured unless asked (--cpu-weights amx): it may crash.
"""

from __future__ import annotations

import statistics

from localserve.engine import cpu_weights

from .bare import BareEngine


def layouts(model: str, mode: str) -> dict[str, cpu_weights.WeightPlan]:
    """The plan for `mode` and the plain one, by the names the table shows."""
    chosen = cpu_weights.plan(model, mode)
    plain = cpu_weights.WeightPlan("plain", cpu_weights.PLAIN, "use_extra_bufts = False", use_extra_bufts=False)
    return {f"--cpu-weights {mode}: {chosen.layout}": chosen, "use_extra_bufts = False": plain}


PROMPT = "The history of computing is a story of people building tools to think with. " * 8


def measure(model: str, plans: dict[str, cpu_weights.WeightPlan], args) -> dict[str, list[tuple[float, float]]]:
    """{layout: (prefill seconds, decode tokens/s) of one stream, round by round}."""
    engines = {name: BareEngine(model, n_ctx=args.ctx_size, threads=args.threads, n_seq=1, weights=plan)
               for name, plan in plans.items()}
    try:
        prompt = next(iter(engines.values())).tokenize(PROMPT)
        order = list(engines)
        for name in order:
            engines[name].run(prompt, 8)                   # warm-up
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name in order}
        for i in range(args.repeat):
            for name in order if i % 2 == 0 else order[::-1]:
                runs[name].append(engines[name].run(prompt, args.tokens))
        return runs
    finally:
        for engine in engines.values():
            engine.close()


def print_table(model: str, args, mode: str = "auto") -> None:
    plans = layouts(model, mode)
    chosen = next(iter(plans.values()))
    runs = measure(model, plans, args)
    plain = runs["use_extra_bufts = False"]
    width = max(len(name) for name in runs)
    print(f"weights on the CPU, 1 stream ({chosen.why}; {len(chosen.repack)} weights overridden to CPU_REPACK):")
    for name, found in runs.items():
        # a ratio is the median of the rounds' own ratios: both layouts ran back to back in each
        ratio = statistics.median(r[1] / p[1] for r, p in zip(found, plain))
        print(f"  {name.ljust(width)}  {statistics.median(r[1] for r in found):6.1f} decode tokens/s "
              f"({ratio:.2f} x use_extra_bufts = False), prefill {statistics.median(r[0] for r in found) * 1000:.0f} ms")


def main() -> int:
    import argparse
    import os
    from .gemma import gemma_model_path
    parser = argparse.ArgumentParser(prog="python -m bench.weights", description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="GGUF model (default: Gemma 3 270M)")
    parser.add_argument("--cpu-weights", default="auto", choices=cpu_weights.MODES)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--ctx-size", type=int, default=4096)
    args = parser.parse_args()
    print_table(args.model or gemma_model_path(), args, args.cpu_weights)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
