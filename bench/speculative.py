"""Speculative decoding's figures for `make bench`: five ratios, each paired within a round.

- edit: the prompt holds a ~600-token source file (and one copy of it) and asks for it back with
  one rename; greedy.
  localserve (speculation on, the default) against the bare engine's plain token loop on the
  same tokens; also how many leading tokens equal the non-speculative server's output;
- edit against llama-server with --spec-type ngram-mod (when it is on PATH, not with --quick):
  both servers up at once, each round's fresh prompt (a marker no cache knows) to the bare loop,
  localserve and llama-server in an order that turns with the round; the ratio is the median of
  the rounds' localserve / llama-server (what ngram-mod keeps between requests: docs/performance.rst);
- free text: the single-stream workload, where little can be copied: no loss is the target;
- 4 edit streams at once: localserve's aggregate against the same server with --speculative off;
- prediction: the edit workload with the original file as OpenAI's `prediction`.
Each row shows the acceptance rate of its drafts. The ratios are also drawn as an SVG chart
(chart.py) in bench/results/.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from pathlib import Path
from typing import Callable

from . import table
from .chart import Bar, write_svg
from .client import StreamResult, concurrent_streams, stream_completion
from .server import LlamaServer, RunningServer

SOURCE = (Path(__file__).with_name("edit_sample.txt")).read_text()
# Gemma 3 270M (the benches' model) is a base model: asked for a file back, it writes a file of its own; shown one
# faithful copy first, it copies (as an instruction-tuned model asked for its edit does).
EDIT_PROMPT = ("inventory.py:\n\n```python\n" + SOURCE + "```\n\nThe same file, copied exactly:\n\n```python\n"
               + SOURCE + "```\n\nThe same file again, with the method `low_stock` renamed `running_low`:"
               "\n\n```python\n")
TARGETS = {"edit": 2.7, "edit_vs_llama": 1.0, "free": 0.97, "edit_4": 1.3, "prediction": 2.5}
EDITS_PER_ROUND = 2     # the edit is the noisiest row (the output turns on near-ties): twice the pairs
RESULTS = Path(__file__).with_name("results")


def acceptance(results: list[StreamResult]) -> float | None:
    drafted = sum(r.accepted + r.rejected for r in results)
    return sum(r.accepted for r in results) / drafted if drafted else None


def run(model: str, engine, work, args) -> dict:
    """Start localserve with and without speculation (and llama-server's ngram-mod beside them),
    measure, print the table, draw the chart."""
    edit = engine.tokenize(EDIT_PROMPT)
    n_edit = len(engine.tokenize(SOURCE)) + 8
    work.as_text(edit)
    common = ("--threads", str(args.threads), "--ctx-size", str(args.ctx_size), "--slots", "4", "--no-store")
    rival = (LlamaServer(model, args.threads, args.ctx_size, slots=4, extra=("--spec-type", "ngram-mod"))
             if LlamaServer.available() and not args.quick else contextlib.nullcontext())
    with RunningServer(model, *common) as spec, RunningServer(model, *common, "--speculative", "off") as plain, \
            rival as llama:
        figures = measure(spec.port, plain.port, llama.port if llama else None, engine, work, edit, n_edit, args)
    print_table(figures)
    chart = draw(figures, args)
    print(f"chart: {chart}")
    return figures


def measure(spec_port: int, plain_port: int, llama_port: int | None, engine, work, edit: list[int], n_edit: int,
            args) -> dict:
    ban = {str(t): -100 for t in work.ban}
    base = {"temperature": 0, "logit_bias": ban}
    rounds = 1 if args.quick else max(1, args.repeat // 2 + 1)
    for port in (spec_port, plain_port, llama_port):                    # warm-up
        if port is not None:
            stream_completion(port, {**base, "prompt": edit, "max_tokens": 8})
    edit_body = {**base, "max_tokens": n_edit}
    sides: dict[str, Callable[[list[int]], float]] = {
        "bare": lambda prompt: engine.run(prompt, n_edit)[1],
        "ours": lambda prompt: _kept(edits, stream_completion(spec_port, {**edit_body, "prompt": prompt})),
        "prediction": lambda prompt: _kept(preds, stream_completion(spec_port, {
            **edit_body, "prompt": prompt, "prediction": {"type": "content", "content": SOURCE}}))}
    if llama_port is not None:
        sides["llama"] = lambda prompt: _kept(llamas, stream_completion(llama_port, {**edit_body, "prompt": prompt}))
    edits, preds, llamas, frees, fours, plains4 = [], [], [], [], [], []
    edit_ratios, pred_ratios, llama_ratios, vs_llama, free_ratios, four_ratios = [], [], [], [], [], []
    for i in range(rounds):
        bare_first = i % 2 == 0             # which side runs first alternates: drift favours neither
        for j in range(1 if args.quick else EDITS_PER_ROUND):
            rates = in_turn(i * EDITS_PER_ROUND + j, work.fresh(edit), sides)
            edit_ratios.append(rates["ours"] / rates["bare"])
            pred_ratios.append(rates["prediction"] / rates["bare"])
            if "llama" in rates:
                llama_ratios.append(rates["llama"] / rates["bare"])
                vs_llama.append(rates["ours"] / rates["llama"])
        free = work.fresh(work.prompt)
        bare_free = engine.run(free, args.tokens)[1] if bare_first else None
        frees.append(stream_completion(spec_port, {**base, "prompt": free, "max_tokens": args.tokens}))
        if not bare_first:
            bare_free = engine.run(free, args.tokens)[1]
        free_ratios.append(frees[-1].decode_rate / bare_free)
        prompts = [work.fresh(edit) for _ in range(4)]
        order = [(spec_port, fours), (plain_port, plains4)]
        rates = {}
        for port, sink in (order if bare_first else order[::-1]):
            rates[port] = aggregate(port, {**base, "max_tokens": n_edit}, prompts, sink)
        four_ratios.append(rates[spec_port] / rates[plain_port])
    same = leading_agreement(spec_port, plain_port, engine, base, edit, n_edit)
    figures = {
        "edit": (statistics.median(edit_ratios), acceptance(edits), statistics.median(r.decode_rate for r in edits)),
        "free": (statistics.median(free_ratios), acceptance(frees), statistics.median(r.decode_rate for r in frees)),
        "edit_4": (statistics.median(four_ratios), acceptance(fours), None),
        "prediction": (statistics.median(pred_ratios), acceptance(preds),
                       statistics.median(r.decode_rate for r in preds)),
        "agreement": same,
        "rounds": rounds,
    }
    if vs_llama:
        figures["edit_vs_llama"] = (statistics.median(vs_llama), None,
                                    statistics.median(r.decode_rate for r in llamas))
        figures["llama_edit_vs_bare"] = statistics.median(llama_ratios)
        figures["per_round"] = [(ours, theirs) for ours, theirs in zip(edit_ratios, llama_ratios)]
    return figures


def in_turn(turn: int, prompt: list[int], sides: dict[str, Callable[[list[int]], float]]) -> dict[str, float]:
    """Each side's decode rate on the same prompt, the order turning with `turn`: drift favours none."""
    names = list(sides)
    k = turn % len(names)
    return {name: sides[name](prompt) for name in names[k:] + names[:k]}


def _kept(sink: list[StreamResult], result: StreamResult) -> float:
    sink.append(result)
    return result.decode_rate


def aggregate(port: int, base: dict, prompts: list[list[int]], sink: list[StreamResult]) -> float:
    results, elapsed = concurrent_streams(port, base, prompts)
    sink.extend(results)
    return sum(r.completion_tokens for r in results) / elapsed


def leading_agreement(spec_port: int, plain_port: int, engine, base: dict, edit: list[int], n: int) -> tuple[int, int]:
    """(leading tokens of the speculative output equal to the plain server's, tokens of the plain output)."""
    body = {**base, "prompt": edit, "max_tokens": n}
    ours = stream_completion(spec_port, dict(body), collect_text=True).text
    theirs = stream_completion(plain_port, dict(body), collect_text=True).text
    shared = 0
    while shared < min(len(ours), len(theirs)) and ours[shared] == theirs[shared]:
        shared += 1
    count = lambda text: max(0, len(engine.tokenize(text)) - 1)      # noqa: E731 (less the BOS)
    return count(theirs[:shared]) if shared < len(theirs) else count(theirs), count(theirs)


def _rate(value) -> str:
    return "" if value is None else f"{value * 100:.0f}%"


def print_table(f: dict) -> None:
    llama = f.get("llama_edit_vs_bare")
    rows = [("measure", "ratio", "reference", "target", "acceptance", "tokens/s", "llama-server")]
    labels = {"edit": ("edit, 1 stream (~600-token file)", "x bare"),
              "edit_vs_llama": ("edit against llama-server", "x ngram-mod"),
              "free": ("free text, 1 stream", "x bare"),
              "edit_4": ("edit, 4 streams aggregate", "x --speculative off"),
              "prediction": ("edit with prediction", "x bare")}
    for key, (label, reference) in labels.items():
        if key not in f:
            continue
        ratio, rate, tps = f[key]
        theirs = {"edit": f"{llama:.2f} x bare" if llama else "", "edit_vs_llama": f"{tps:.1f} tokens/s" if tps else ""}
        rows.append((label, f"{ratio:.2f}", reference, f">= {TARGETS[key]}", _rate(rate),
                     f"{tps:.1f}" if tps and key != "edit_vs_llama" else "", theirs.get(key, "")))
    table.print_table(rows[0], rows[1:],
                      title="speculative decoding (paired within each round, median of %d rounds)" % f["rounds"])
    if "per_round" in f:
        print("edit x bare, each pair (localserve / llama-server ngram-mod): "
              + ", ".join(f"{ours:.2f} / {theirs:.2f}" for ours, theirs in f["per_round"]))
    same, total = f["agreement"]
    print(f"edit output: the first {same} of {total} tokens equal the non-speculative server's "
          f"(llama.cpp's kernels are not batch-invariant: a near-tie may flip where a draft is verified)")


def draw(f: dict, args) -> Path:
    bars = [Bar("edit, 1 stream (x bare plain decode)", f["edit"][0], TARGETS["edit"],
                f"accepted {_rate(f['edit'][1])}", f.get("llama_edit_vs_bare")),
            Bar("free text, 1 stream (x bare)", f["free"][0], TARGETS["free"], f"accepted {_rate(f['free'][1])}"),
            Bar("edit, 4 streams (x speculation off)", f["edit_4"][0], TARGETS["edit_4"],
                f"accepted {_rate(f['edit_4'][1])}"),
            Bar("edit with prediction (x bare)", f["prediction"][0], TARGETS["prediction"],
                f"accepted {_rate(f['prediction'][1])}")]
    if "edit_vs_llama" in f:
        bars.insert(1, Bar("edit (x llama-server ngram-mod)", f["edit_vs_llama"][0], TARGETS["edit_vs_llama"]))
    title = f"localserve speculative decoding: Gemma 3 270M, {args.threads} threads, {os.cpu_count()} CPUs"
    return write_svg(RESULTS / "speculative.svg", title, bars)
