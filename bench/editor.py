"""The editor workload for `make bench`: code completion as llama.vim drives /infill.

A 2,000-token file with 16 repository chunks is warmed once (a request with `n_predict: 0`,
as llama.vim sends when its chunks change), then 20 "keystrokes": the cursor line grows by a
few characters each time (llama.vim sends it as `prompt`, after the unchanged prefix), each
asking 32 tokens, streamed. Measured: the median time to the first token and to the 32nd,
against the bare engine doing the same prefill and decode with the prefix it already holds
reused (target: TTFT <= 1.1 x the bare floor), and llama-server's /infill when it is on PATH.
The contenders run side by side and each keystroke is typed into each in turn (interleaved):
the box's speed drifts by a fifth over minutes, more than the margin measured.

On a model with sliding-window layers (Gemma 3: a 512-token window) the floor's cache keeps only
the window there, as the server's does. A keystroke cuts the sequence before the suffix, some
500 tokens before its end; when the window has moved past that cut (at 8192 tokens of context
here, not at 4096, where llama.cpp's window cache of n_swa + n_batch cells still holds it), the
bare loop restores the window's state it saved at the last cut (WindowCheckpoints: llama.cpp's
partial state calls, as the server's swa_checkpoints.py) and computes from there. Before, it
prefilled on top of a window that had dropped positions the new tokens attend to: cheap and
wrong. Its full-window alternative (swa_full) would attend over the whole context in every
layer, a floor slower than the work a correct engine needs.

Needs a model with fill-in-the-middle tokens (a coding model: `--model`). A model without them
(Gemma 3 270M) is measured as a stand-in: a copy whose unused control tokens (`<unused0>`…) are
named its FIM tokens. Its completions mean nothing, but prefill and decode cost what the model
costs, which is what the figures compare.

    python -m bench.editor [--model PATH] [--threads N] [--ctx-size N] [--no-llama-server]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import ExitStack

from localserve.engine import cpu_weights
from localserve.engine.gguf_meta import read_shape
from localserve.prompt.fim import ExtraFile

from .bare import BareEngine
from .client import post_streaming
from .demo import model_or_demo
from .editor_floor import BareEditor, BareVocab, Keystroke
from .server import LlamaServer, RunningServer
from .table import print_table

KEYSTROKES = 20
PREDICT = 32
CHUNKS = 16
TARGET = 1.1


def synthetic_file(n_functions: int, tag: str) -> str:
    """Plausible Python: small functions over a few names, different for each tag."""
    return "".join(f"def {tag}_step_{i}(values, scale={i % 7 + 1}):\n"
                   f"    total = 0\n"
                   f"    for index, value in enumerate(values):\n"
                   f"        total += value * scale + index  # {tag} {i}\n"
                   f"    return total / max(len(values), 1)\n\n" for i in range(n_functions))


def keystrokes(n_file_tokens_hint: int = 2000) -> tuple[list[ExtraFile], list[dict]]:
    """The repository chunks and each keystroke's /infill fields (prefix, suffix, prompt)."""
    chunks = [ExtraFile(f"lib/module_{i}.py", synthetic_file(2, f"m{i}")) for i in range(CHUNKS)]
    text = synthetic_file(n_file_tokens_hint // 55, "main")
    lines = text.split("\n")
    cursor = len(lines) * 3 // 4
    prefix, suffix = "\n".join(lines[:cursor]) + "\n", "\n" + "\n".join(lines[cursor + 1:])
    typed = "    result = main_step_1(values, scale=3) + main_step_2(values)"
    steps = [{"input_prefix": prefix, "input_suffix": suffix, "prompt": typed[:8 + 3 * k]} for k in range(KEYSTROKES)]
    return chunks, steps


class InfillRefused(Exception):
    """A server answered an /infill with an error: its figures would be no figures."""


def infill_stream(port: int, body: dict) -> tuple[float, float, dict]:
    """(seconds to the first content, seconds to the end, the last event: tokens_predicted,
    tokens_evaluated) of a streamed /infill."""
    sock, started = post_streaming(port, "/infill", {**body, "stream": True})
    pending, first, last = b"", None, None
    while last is None:
        data = sock.recv(65536)
        if not data:
            break
        if not pending and data.startswith(b"HTTP/") and not data.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
            sock.close()        # an error read as a stream would count as an answer of no tokens
            raise InfillRefused(data.split(b"\r\n\r\n", 1)[-1][:300].decode(errors="replace"))
        lines = (pending + data).split(b"\n")
        pending = lines.pop()
        for line in lines:
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if event.get("stop"):
                last = event
            elif first is None and event.get("content"):
                first = time.perf_counter()
    end = time.perf_counter()
    sock.close()
    return (first or end) - started, end - started, last or {}


class ServerEditor:
    """An editor typing against a server's /infill: the chunks warmed once, then keystrokes."""

    def __init__(self, port: int, chunks: list[ExtraFile], ban: list[int]):
        self.port = port
        extra = [{"filename": c.filename, "text": c.text} for c in chunks]
        self.common = {"input_extra": extra, "temperature": 0, "cache_prompt": True,
                       "logit_bias": [[t, -100] for t in ban]}

    def warm(self) -> None:
        infill_stream(self.port, {**self.common, "input_prefix": "", "input_suffix": "", "prompt": "", "n_predict": 0})

    def keystroke(self, step: dict) -> Keystroke:
        ttft, total, answer = infill_stream(self.port, {**self.common, **step, "n_predict": PREDICT})
        return Keystroke(ttft, total, answer.get("tokens_predicted", 0), answer.get("tokens_evaluated", 0),
                         answer.get("timings", {}).get("prompt_n", 0))

    def restored(self) -> int | str:
        return checkpoints_restored(self.port)


def checkpoints_restored(port: int) -> int | str:
    """How many keystrokes localserve served from a window checkpoint ("" for another server)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/slots", timeout=5) as resp:
            report = json.loads(resp.read())
    except (OSError, ValueError):
        return ""
    models = report.get("models", {}) if isinstance(report, dict) else {}      # llama-server's is a list
    return sum(state.get("swa_checkpoints", {}).get("restored", 0) for state in models.values()) if models else ""


def interleaved(editors: dict, steps: list[dict]) -> dict[str, dict]:
    """Each editor warmed, then every keystroke typed into each in turn (the order rotating from
    one keystroke to the next): the box's speed drifts by a fifth over minutes, and a floor
    measured minutes apart from its contender would compare the drift. Medians per editor; a
    server that refuses a keystroke is left out, with the reason."""
    typed: dict[str, list[Keystroke]] = {name: [] for name in editors}

    def type_into(name: str, action) -> None:
        try:
            action(editors[name])
        except InfillRefused as exc:
            print(f"editor workload: {name} refused a keystroke, left out: {exc}", flush=True)
            del typed[name]
    for name in list(typed):
        type_into(name, lambda editor: editor.warm())
    for k, step in enumerate(steps):
        names = list(typed)
        for name in names[k % len(names):] + names[:k % len(names)]:
            type_into(name, lambda editor: typed[name].append(editor.keystroke(step)))
    return {name: {"ttft": statistics.median(s.ttft for s in strokes), "last": statistics.median(s.last for s in strokes),
                   "tokens": min(s.tokens for s in strokes), "prompt": round(statistics.median(s.prompt for s in strokes)),
                   "computed": round(statistics.median(s.computed for s in strokes)),
                   "restored": editors[name].restored()}
            for name, strokes in typed.items()}


def llama_server_batch(n_ctx: int) -> int:
    """llama-server's /infill takes n_batch tokens around the cursor (3/4 prefix, 1/4 suffix) and
    fills what is left of the context, less twice its -n, with the extra chunks: with a context no
    larger than its n_batch (2048 by default) every keystroke is a 400 "exceeds the available
    context size". So its batch is at most half the context."""
    return min(2048, n_ctx // 2)


FIM_STAND_INS = ("fim_pre", "fim_suf", "fim_mid", "fim_pad")


def fim_stand_in(model: str, directory: str) -> str | None:
    """A copy of `model` whose first unused control tokens are named its FIM tokens (gguf's
    new-metadata script); None when its vocabulary has no `<unusedN>` tokens to lend."""
    import gguf     # a test dependency, as make bench installs it
    field = gguf.GGUFReader(model).fields["tokenizer.ggml.tokens"]
    unused = [n for n, index in enumerate(field.data[:1000])
              if bytes(field.parts[index]).decode(errors="replace").startswith("<unused")]
    if len(unused) < len(FIM_STAND_INS):
        return None
    copy = os.path.join(directory, "fim-stand-in.gguf")
    options = [arg for name, token in zip(FIM_STAND_INS, unused) for arg in ("--special-token-by-id", name, str(token))]
    subprocess.run([sys.executable, "-m", "gguf.scripts.gguf_new_metadata", model, copy, *options, "--force"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return copy


def run(model: str, args) -> bool:
    """Measure and print the table (on a FIM stand-in of a model without FIM tokens); False when
    the model cannot fill in the middle and lends no tokens for a stand-in."""
    engine = BareEngine(model, n_ctx=256, threads=args.threads, n_seq=1, weights=cpu_weights.plan(model, "auto"))
    missing = BareVocab(engine, 256).fim.missing()
    engine.close()
    if not missing:
        return _run(model, args)
    with tempfile.TemporaryDirectory() as directory:
        stand_in = fim_stand_in(model, directory)
        if stand_in is None:
            print(f"editor workload: {os.path.basename(model)} has no fill-in-the-middle tokens; give a coding "
                  f"model with --model", flush=True)
            return False
        print(f"editor workload: {os.path.basename(model)} has no fill-in-the-middle tokens; measured on a copy "
              f"whose unused control tokens stand in for them (timings only)", flush=True)
        return _run(stand_in, args)


def _run(model: str, args) -> bool:
    n_ctx = min(args.ctx_size, read_shape(model).n_ctx_train or args.ctx_size)
    if n_ctx < args.ctx_size:
        # llama-server caps a slot at the training context: all three get the same context
        print(f"editor workload: {os.path.basename(model)} was trained on {n_ctx} tokens of context; "
              f"measured at {n_ctx}, not {args.ctx_size}", flush=True)
    engine = BareEngine(model, n_ctx=n_ctx, threads=args.threads, n_seq=1, weights=cpu_weights.plan(model, "auto"))
    vocab = BareVocab(engine, n_ctx)
    if vocab.fim.missing():
        print(f"editor workload: {os.path.basename(model)} has no fill-in-the-middle tokens; give a coding "
              f"model with --model", flush=True)
        engine.close()
        return False
    chunks, steps = keystrokes()
    ban = engine.eog_tokens()
    editors = {"bare": BareEditor(engine, vocab, chunks, PREDICT)}
    flags = ("--threads", str(args.threads), "--ctx-size", str(n_ctx), "--slots", "1", "--no-store")
    with ExitStack() as running:
        server = running.enter_context(RunningServer(model, *flags))
        editors["localserve"] = ServerEditor(server.port, chunks, ban)
        if LlamaServer.available() and not getattr(args, "no_llama_server", False):
            # -n: its /infill leaves the extra context room for twice the server's n_predict (-1 by default).
            # --cache-reuse 256: llama.vim's recommended server setting. --swa-full: on a sliding-window
            # model its cache otherwise cannot go back to the cut, and every keystroke computed the
            # whole prompt again (7.4 s at 4096); without a window it is ignored.
            extra = ("-n", str(PREDICT), "-b", str(llama_server_batch(n_ctx)), "--cache-reuse", "256", "--swa-full")
            other = running.enter_context(LlamaServer(model, args.threads, n_ctx, slots=1, extra=extra))
            editors["llama-server"] = ServerEditor(other.port, chunks, ban)
        figures = interleaved(editors, steps)
    engine.close()
    if "localserve" not in figures:
        return False
    bare, ours = figures.pop("bare"), figures.pop("localserve")
    others = figures
    rows = [("time to first token, ms", f"{bare['ttft'] * 1000:.1f} (floor)", f"{ours['ttft'] * 1000:.1f}",
             *(f"{o['ttft'] * 1000:.1f}" for o in others.values()), f"{ours['ttft'] / bare['ttft']:.2f} x floor",
             f"<= {TARGET}"),
            (f"time to token {PREDICT}, ms", f"{bare['last'] * 1000:.1f}", f"{ours['last'] * 1000:.1f}",
             *(f"{o['last'] * 1000:.1f}" for o in others.values()), f"{ours['last'] / bare['last']:.2f} x bare", ""),
            ("tokens per answer (fewest)", bare["tokens"], ours["tokens"], *(o["tokens"] for o in others.values()),
             "", ""),
            # llama-server lays out its own window around the cursor: its prompts may be shorter
            ("prompt tokens (median)", bare["prompt"], ours["prompt"], *(o["prompt"] for o in others.values()),
             "", ""),
            ("prompt tokens computed (median)", bare["computed"], ours["computed"],
             *(o["computed"] for o in others.values()), "", ""),
            ("keystrokes from a window checkpoint", bare["restored"], ours["restored"],
             *(o["restored"] for o in others.values()), "", "")]
    print_table(("editor workload", "bare engine", "localserve", *others, "ratio", "target"), rows,
                title=f"editor: {CHUNKS} chunks warmed, {KEYSTROKES} keystrokes of {PREDICT} tokens (medians)")
    return True


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.editor")
    parser.add_argument("--model", help="GGUF model with FIM tokens (default: Gemma 3 270M, on a FIM stand-in)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--ctx-size", type=int, default=8192)
    parser.add_argument("--no-llama-server", action="store_true", help="leave llama-server's column out")
    args = parser.parse_args()
    model = model_or_demo(args.model)
    if model is None:
        return 2
    return 0 if run(model, args) else 1


if __name__ == "__main__":
    sys.exit(main())
