"""What the benches of one surface against the bare engine share (audio.py, vision.py,
embeddings.py): their standalone `main` (a model, the threads, the rounds; the demo model by
default; a temporary directory for a synthetic projector) and the cells of their table rows."""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Callable

from .demo import model_or_demo

Bench = Callable[[str, argparse.Namespace, str], None]      # (model, the arguments, a temporary directory)


def standalone(prog: str, bench: Bench, options: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """`python -m bench.<name>`: --model (default: the demo model), then the bench's own
    `options`, --threads and --repeat; the exit status."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--model", help="GGUF model (default: Gemma 3 270M)")
    if options is not None:
        options(parser)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    model = model_or_demo(args.model)
    if model is None:
        return 2
    print(f"model {os.path.basename(model)}, {args.threads} threads, median of {args.repeat}", flush=True)
    with tempfile.TemporaryDirectory() as directory:
        bench(model, args, directory)
    return 0


def ratio(value: float, against: str = "bare") -> str:
    return f"{value:.3f} x {against}"


def seconds_row(name: str, reference: float | str, ours: float, value: float, target: str,
                against: str = "bare") -> tuple[str, str, str, str, str]:
    """A row of seconds: the reference's (or a cell that says what it is), ours, their ratio, the target."""
    cell = reference if isinstance(reference, str) else f"{reference:.3f}"
    return name, cell, f"{ours:.3f}", ratio(value, against), target
