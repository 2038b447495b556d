"""Speculative decoding's figures for `make bench`: four ratios, each paired within a round.

- edit: the prompt holds a ~600-token source file (and one copy of it) and asks for it back with
  one rename; greedy.
  localserve (speculation on, the default) against the bare engine's plain token loop on the
  same tokens; also how many leading tokens equal the non-speculative server's output;
- free text: the single-stream workload, where little can be copied: no loss is the target;
- 4 edit streams at once: localserve's aggregate against the same server with --speculative off;
- prediction: the edit workload with the original file as OpenAI's `prediction`;
- llama-server with --spec-type ngram-mod on the edit workload, when it is on PATH.
Each row shows the acceptance rate of its drafts. The ratios are also drawn as an SVG chart
(chart.py) in bench/results/.
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

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
TARGETS = {"edit": 2.7, "free": 0.97, "edit_4": 1.3, "prediction": 2.5}
RESULTS = Path(__file__).with_name("results")


def acceptance(results: list[StreamResult]) -> float | None:
    drafted = sum(r.accepted + r.rejected for r in results)
    return sum(r.accepted for r in results) / drafted if drafted else None


def run(model: str, engine, work, args) -> dict:
    """Start localserve with and without speculation, measure, print the table, draw the chart."""
    edit = engine.tokenize(EDIT_PROMPT)
    n_edit = len(engine.tokenize(SOURCE)) + 8
    work.as_text(edit)
    common = ("--threads", str(args.threads), "--ctx-size", str(args.ctx_size), "--slots", "4", "--no-store")
    with RunningServer(model, *common) as spec, RunningServer(model, *common, "--speculative", "off") as plain:
        figures = measure(spec.port, plain.port, engine, work, edit, n_edit, args)
    if LlamaServer.available() and not args.quick:
        with LlamaServer(model, args.threads, args.ctx_size, slots=4, extra=("--spec-type", "ngram-mod")) as server:
            figures["llama_server_edit"] = edit_vs_bare(server, engine, work, edit, n_edit, args)
    print_table(figures)
    chart = draw(figures, args)
    print(f"chart: {chart}")
    return figures


def measure(spec_port: int, plain_port: int, engine, work, edit: list[int], n_edit: int, args) -> dict:
    ban = {str(t): -100 for t in work.ban}
    base = {"temperature": 0, "logit_bias": ban}
    rounds = 1 if args.quick else max(1, args.repeat // 2 + 1)
    stream_completion(spec_port, {**base, "prompt": edit, "max_tokens": 8})           # warm-up
    stream_completion(plain_port, {**base, "prompt": edit, "max_tokens": 8})
    edits, preds, frees, fours, plains4 = [], [], [], [], []
    edit_ratios, pred_ratios, free_ratios, four_ratios = [], [], [], []
    for i in range(rounds):
        prompt = work.fresh(edit)
        bare_first = i % 2 == 0             # which side runs first alternates: drift favours neither
        bare_rate = engine.run(prompt, n_edit)[1] if bare_first else None
        edits.append(stream_completion(spec_port, {**base, "prompt": prompt, "max_tokens": n_edit}))
        preds.append(stream_completion(spec_port, {**base, "prompt": prompt, "max_tokens": n_edit,
                                                   "prediction": {"type": "content", "content": SOURCE}}))
        if not bare_first:
            bare_rate = engine.run(prompt, n_edit)[1]
        edit_ratios.append(edits[-1].decode_rate / bare_rate)
        pred_ratios.append(preds[-1].decode_rate / bare_rate)
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
    return {
        "edit": (statistics.median(edit_ratios), acceptance(edits), statistics.median(r.decode_rate for r in edits)),
        "free": (statistics.median(free_ratios), acceptance(frees), statistics.median(r.decode_rate for r in frees)),
        "edit_4": (statistics.median(four_ratios), acceptance(fours), None),
        "prediction": (statistics.median(pred_ratios), acceptance(preds),
                       statistics.median(r.decode_rate for r in preds)),
        "agreement": same,
        "rounds": rounds,
    }


def edit_vs_bare(server, engine, work, edit: list[int], n_edit: int, args) -> tuple:
    base = {"temperature": 0, "logit_bias": {str(t): -100 for t in work.ban}, "text_prompts": work.texts}
    ratios = []
    for i in range(1 if args.quick else max(1, args.repeat // 2 + 1)):
        bare_rate = engine.run(edit, n_edit)[1]
        result = stream_completion(server.port, {**base, "prompt": edit, "max_tokens": n_edit})
        ratios.append(result.decode_rate / bare_rate)
    return statistics.median(ratios), None, None


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
    llama = f.get("llama_server_edit")
    rows = [("measure", "ratio", "reference", "target", "acceptance", "tokens/s", "llama-server")]
    labels = {"edit": ("edit, 1 stream (~600-token file)", "x bare"),
              "free": ("free text, 1 stream", "x bare"),
              "edit_4": ("edit, 4 streams aggregate", "x --speculative off"),
              "prediction": ("edit with prediction", "x bare")}
    for key, (label, reference) in labels.items():
        ratio, rate, tps = f[key]
        rows.append((label, f"{ratio:.2f}", reference, f">= {TARGETS[key]}", _rate(rate),
                     f"{tps:.1f}" if tps else "", f"{llama[0]:.2f}" if llama and key == "edit" else ""))
    table.print_table(rows[0], rows[1:],
                      title="speculative decoding (paired within each round, median of %d rounds)" % f["rounds"])
    same, total = f["agreement"]
    print(f"edit output: the first {same} of {total} tokens equal the non-speculative server's "
          f"(llama.cpp's kernels are not batch-invariant: a near-tie may flip where a draft is verified)")


def draw(f: dict, args) -> Path:
    llama = f.get("llama_server_edit")
    bars = [Bar("edit, 1 stream (x bare plain decode)", f["edit"][0], TARGETS["edit"],
                f"accepted {_rate(f['edit'][1])}", llama[0] if llama else None),
            Bar("free text, 1 stream (x bare)", f["free"][0], TARGETS["free"], f"accepted {_rate(f['free'][1])}"),
            Bar("edit, 4 streams (x speculation off)", f["edit_4"][0], TARGETS["edit_4"],
                f"accepted {_rate(f['edit_4'][1])}"),
            Bar("edit with prediction (x bare)", f["prediction"][0], TARGETS["prediction"],
                f"accepted {_rate(f['prediction'][1])}")]
    title = f"localserve speculative decoding: Gemma 3 270M, {args.threads} threads, {os.cpu_count()} CPUs"
    return write_svg(RESULTS / "speculative.svg", title, bars)
