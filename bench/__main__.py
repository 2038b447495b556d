"""make bench: the server against the bare engine, on the demo model, in one run.

Prints a table: bare-engine decode tokens/s and prefill time, the server's
single-stream tokens/s and time to first token, and their ratios. Run with
`python -m bench [--model PATH] [--threads N] [--tokens N] [--repeat N]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

from .bare import BareEngine
from .client import stream_completion
from .server import RunningServer

PROMPT = ("The history of computing is a story of people building tools to think with. "
          "From the abacus to the mechanical calculators of the seventeenth century, ") * 3


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--model", help="GGUF model (default: the demo model)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tokens", type=int, default=128, help="tokens generated per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs per measurement (median reported)")
    parser.add_argument("--ctx-size", type=int, default=4096)
    return parser.parse_args()


def measure_bare(model: str, args, prompt_text: str) -> tuple[list[int], float, float]:
    engine = BareEngine(model, n_ctx=args.ctx_size, threads=args.threads)
    prompt = engine.tokenize(prompt_text)
    engine.run(prompt, 8)                                   # warm-up
    runs = [engine.run(prompt, args.tokens) for _ in range(args.repeat)]
    engine.close()
    return prompt, statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)


def measure_server(model: str, args, prompt: list[int]) -> tuple[float, float]:
    with RunningServer(model, "--threads", str(args.threads), "--ctx-size", str(args.ctx_size)) as server:
        ban = {str(t): -100 for t in server.eog_tokens()}
        body = {"prompt": prompt, "max_tokens": args.tokens, "temperature": 0, "logit_bias": ban}
        stream_completion(server.port, {**body, "max_tokens": 8})          # warm-up
        runs = []
        for i in range(args.repeat):
            # a different first token each time: the prompt cache must not help the TTFT figure
            runs.append(stream_completion(server.port, {**body, "prompt": [prompt[0], 100 + i] + prompt[1:]}))
    return statistics.median(r.ttft for r in runs), statistics.median(r.decode_rate for r in runs)


def main() -> int:
    args = parse_args()
    model = args.model
    if model is None:
        from localserve.demo import DemoUnavailable, demo_model_path
        try:
            model = demo_model_path()
        except DemoUnavailable as exc:
            print(f"bench: {exc}", file=sys.stderr)
            return 2
    print(f"model {Path(model).name}, {args.threads} threads, {args.tokens} tokens per run, "
          f"median of {args.repeat}")
    prompt, bare_prefill, bare_rate = measure_bare(model, args, PROMPT)
    ttft, rate = measure_server(model, args, prompt)
    rows = [
        ("decode tokens/s, single stream", f"{bare_rate:.1f}", f"{rate:.1f}", f"{rate / bare_rate:.3f}", ">= 0.95"),
        (f"prefill {len(prompt) + 1} tokens → first token, ms", f"{bare_prefill * 1000:.1f}", f"{ttft * 1000:.1f}",
         f"{(ttft - bare_prefill) * 1000:+.1f} ms", "<= +5 ms"),
    ]
    print_table(("measure", "bare engine", "localserve", "ratio / delta", "target"), rows)
    return 0


def print_table(header, rows) -> None:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = "  ".join("-" * w for w in widths)
    print(line)
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print(line)
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    print(line)


if __name__ == "__main__":
    sys.exit(main())
