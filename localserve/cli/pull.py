"""`localserve pull NAME...`: a model from the Hugging Face Hub (or $HF_ENDPOINT) into the
Hugging Face cache, where a server finds it (models/discovery/) and so do other tools. Names
as llama-server and Ollama take them: org/repo[:quant], hf.co/org/repo[:quant].

Progress: a bar redrawn on one line when stdout is a terminal; else a plain line per file
each PLAIN_STEP percent (logs and pipes read it). Exit status 0 when every name was pulled, 1
when a pull failed, 2 for a bad name or usage; Ctrl-C stops (the partial file is kept, and
the next pull resumes it).
"""

from __future__ import annotations

import argparse
import sys
import time

from ..models.hub import pull as hub_pull
from ..models.hub.errors import HubError
from .flags import EXIT_USAGE, configure_logging

PLAIN_STEP = 10          # percent between two plain progress lines
BAR_WIDTH = 30
BAR_REDRAW = 0.1         # seconds between two redraws of the bar


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="localserve pull", description="Download a GGUF model from the "
                                     "Hugging Face Hub (HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE apply) into the "
                                     "Hugging Face cache.")
    parser.add_argument("names", nargs="+", metavar="NAME", help="org/repo[:quant] or hf.co/org/repo[:quant]")
    parser.add_argument("--log-level", default="warning", choices=("debug", "info", "warning", "error"))
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    status = 0
    for name in args.names:
        try:
            status = max(status, pull_one(name, sys.stdout))
        except KeyboardInterrupt:
            print("\nlocalserve pull: stopped; the partial file is kept and the next pull resumes it", file=sys.stderr)
            return 130
    return status


def pull_one(name: str, out) -> int:
    try:
        prepared = hub_pull.prepare(name)
        report = Bar(out) if out.isatty() else Plain(out)
        for event in hub_pull.run(prepared):
            report.show(event)
        report.end()
    except HubError as exc:
        print(f"localserve pull: {name}: {exc.message}", file=sys.stderr)
        return EXIT_USAGE if exc.status == 400 else 1
    except OSError as exc:
        print(f"localserve pull: {name}: cannot write the cache: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(f"pulled {prepared.model_name}: {prepared.model_path}", file=out, flush=True)
    return 0


def mib(n: int | None) -> str:
    return f"{(n or 0) / (1 << 20):.1f} MiB"


class Plain:
    """A line per status, and per file each PLAIN_STEP percent."""

    def __init__(self, out):
        self.out, self.last_status, self.last_step = out, None, -1

    def show(self, event: hub_pull.Progress) -> None:
        if event.total:
            step = (100 * (event.completed or 0) // event.total) // PLAIN_STEP
            if event.status != self.last_status or step != self.last_step:
                print(f"{event.status}: {100 * (event.completed or 0) // event.total}% "
                      f"({mib(event.completed)} of {mib(event.total)})", file=self.out, flush=True)
            self.last_step = step
        elif event.status != self.last_status:
            print(event.status, file=self.out, flush=True)
        self.last_status = event.status

    def end(self) -> None:
        pass


class Bar:
    """One line redrawn: the file's bar, percent and size."""

    def __init__(self, out):
        self.out, self.drawn, self.last = out, False, 0.0

    def show(self, event: hub_pull.Progress) -> None:
        if not event.total:
            self._line(event.status)
            return
        now = time.monotonic()
        whole = event.completed == event.total
        if now - self.last < BAR_REDRAW and not whole:
            return
        self.last = now
        filled = BAR_WIDTH * (event.completed or 0) // event.total
        self._line(f"{event.status} [{'#' * filled}{'.' * (BAR_WIDTH - filled)}] "
                   f"{100 * (event.completed or 0) // event.total:3d}% {mib(event.completed)}/{mib(event.total)}")

    def _line(self, text: str) -> None:
        self.out.write(f"\r\033[K{text}")
        self.out.flush()
        self.drawn = True

    def end(self) -> None:
        if self.drawn:
            self.out.write("\n")
            self.out.flush()
