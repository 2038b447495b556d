"""make bench: localserve against the bare engine (and llama-server if present), in one run.

Measures, on Gemma 3 270M (bench/gemma.py) unless --model is given:
- bare engine: single-stream decode tokens/s, prefill time, the "second turn"
  floor (prefilling only the new tokens on top of a resident prefix), and the same
  aggregate workload as the server (up to 4 sequences per batch, as its 4 slots):
  what batching in llama.cpp itself gives on this machine;
- plain decoding (decode.py): greedy with speculation off, sampled, and the default
  configuration, each against the bare engine doing the same; the bench exits non-zero
  when one falls under 0.95 x bare;
- sampled decoding in the default configuration against --speculative off and the bare loop,
  paired within each round (sampled.py; guard: 0.97 x off, 0.95 x bare);
- a busy machine (busy.py): single-stream decode quiet and beside a spinning process, for the
  bare loop, localserve (its default threads) and llama-server (guard: localserve keeps half
  its quiet speed, and 0.95 x llama-server loaded);
- localserve: single-stream tokens/s and time to first token; aggregate tokens/s
  with 1, 2, 4 and 8 concurrent streams; second-turn TTFT with 4 conversations
  interleaved; peak RSS; /health latency under load and during slowloris (latency.py);
- several models (models.py): a cold load through the API against llama.cpp's bare load of
  the same file, and the time to switch between two models with --max-models 1;
- llama-server when it is on PATH, and llama-cpp-python's server when its extras
  are installed, with the same workload;
- Ollama's /api/chat and llama-server's /completion: the single-stream and 4-stream rows against
  /v1/chat/completions and /v1/completions on the same server (ollama_chat.py), within 2%;
- embeddings: inputs/s and tokens/s of /v1/embeddings for 256 inputs of ~64 tokens in one
  call and in 8 concurrent calls, against the bare engine (embeddings.py);
- images: an image's encode and prefill through the API against libmtmd's own calls, and a
  second turn with the same image against the first (vision.py; a synthetic projector unless
  --mmproj names the model's own);
- code completion: 20 keystrokes through /infill after a warm-up, against the bare engine
  (editor.py; a model without FIM tokens, as Gemma 3 270M, on a stand-in copy);
- compaction: POST /v1/responses/compact against one generation as long as its summary, and
  the turns after it against the same turns without it (compaction.py);
- agents: a 4,000-token head shared by 4 conversations of 3 turns at once: prompt tokens computed
  and the time to the last first token, against sharing off, the bare engine copying the head
  and llama-server (agents.py);
- several choices: one request with n = 4 against 4 separate requests, one after another and at
  once (choices.py; target: <= 0.6 x one after another).
Prints one table with the ratios and the targets. Figures are medians over rounds; each
ratio is the median of ratios paired within a round (see measure_server).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from localserve.engine import cpu_weights

from . import agents, busy, choices, compaction, decode, editor, embeddings, latency, models, ollama_chat, sampled, \
    speculative, vision, weights
from .bare import BareEngine
from .demo import model_or_demo
from .measure import CONCURRENCY, BareRuns, Workload, measure_server
from .server import LlamaCppPythonServer, LlamaServer, RunningServer
from .table import print_table


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--model", help="GGUF model (default: Gemma 3 270M)")
    parser.add_argument("--mmproj", help="the model's vision projector for the images figure (default: a synthetic one)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tokens", type=int, default=128, help="tokens generated per stream")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per measurement (medians reported)")
    parser.add_argument("--ctx-size", type=int, default=4096)
    parser.add_argument("--quick", action="store_true", help="single-stream figures only")
    parser.add_argument("--speculative-only", action="store_true",
                        help="only speculative decoding's figures (bench/speculative.py)")
    parser.add_argument("--decode-only", action="store_true",
                        help="only plain decoding's figures and their guard (bench/decode.py)")
    parser.add_argument("--scene", help="plain decoding (and --ollama-only): only the configurations whose label "
                                        "holds this (e.g. 'n-gram', '/completion'), without the sampled and "
                                        "busy scenes")
    parser.add_argument("--busy-only", action="store_true",
                        help="only the busy machine: quiet and with a spinner beside (bench/busy.py)")
    parser.add_argument("--sampled-only", action="store_true",
                        help="only sampled decoding's default against --speculative off and bare (bench/sampled.py)")
    parser.add_argument("--table-only", action="store_true",
                        help="only the main table: localserve and llama-server against the bare engine "
                             "(single stream, 1-8 streams, second turn, peak RSS)")
    parser.add_argument("--choices-only", action="store_true",
                        help="only n = 4 against 4 separate requests (bench/choices.py)")
    parser.add_argument("--ollama-only", action="store_true",
                        help="only /api/chat and /completion against OpenAI's routes (bench/ollama_chat.py)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    model = model_or_demo(args.model)
    if model is None:
        return 2
    print(f"model {Path(model).name}, {args.threads} threads, {args.tokens} tokens per stream, "
          f"median of {args.repeat}", flush=True)
    engine = BareEngine(model, n_ctx=args.ctx_size, threads=args.threads, weights=cpu_weights.plan(model, "auto"))
    work = Workload(engine)
    work.as_text(work.prompt, *work.conversations, *(c + work.follow_up for c in work.conversations))
    bare_runs = BareRuns(engine, work, args)
    if args.ollama_only:
        ollama_chat.run(model, work.ban, args)
        engine.close()
        return 0
    if args.choices_only:
        ok = choices.run(model, work.ban, args)
        engine.close()
        return 0 if ok else 1
    if args.speculative_only:
        speculative.run(model, engine, work, args)
        engine.close()
        return 0
    if args.busy_only or args.sampled_only:
        ok = busy.run(model, engine, work, args) if args.busy_only else sampled.run(model, engine, work, args)
        engine.close()
        return 0 if ok else 1
    decode_ok = True
    if not args.table_only:
        decode_ok = run_decode_scenes(model, engine, work, args)
    if args.decode_only:
        engine.close()
        return 0 if decode_ok else 1
    contenders = {}
    with RunningServer(model, "--threads", str(args.threads), "--ctx-size", str(args.ctx_size),
                       "--slots", "4") as server:
        # bare and server runs alternate: a shared machine's drift hits both alike
        contenders["localserve"] = measure_server(server, work, args, bare=bare_runs)
    bare = bare_runs.result()
    if LlamaServer.available() and not args.quick:
        with LlamaServer(model, args.threads, args.ctx_size, slots=4) as server:
            contenders["llama-server"] = measure_server(server, work, args)
    if LlamaCppPythonServer.available() and not args.quick and not args.table_only:
        with LlamaCppPythonServer(model, args.threads, args.ctx_size) as server:
            contenders["llama-cpp-python"] = measure_server(server, work, args)
    print_report(bare, contenders, args)
    if args.table_only:
        engine.close()
        return 0
    ollama_chat.run(model, work.ban, args)          # /api/chat's and /completion's rows beside OpenAI's routes
    speculative.run(model, engine, work, args)     # the four ratios and their chart
    engine.close()
    weights.print_table(model, args)   # the chosen CPU weight layout against use_extra_bufts = False
    embeddings.run(model, args)         # /v1/embeddings against the bare engine (bench/embeddings.py)
    vision.run(model, args, args.mmproj)    # an image through the API against bare libmtmd (bench/vision.py)
    if not args.quick:
        latency.run(model, args)        # /health under load and during slowloris (bench/latency.py)
        models.run(model, args)         # cold load and model switches against a bare load (bench/models.py)
        editor.run(model, args)         # code completion through /infill against the bare engine (bench/editor.py)
        compaction.run(model, args)     # a compaction against one generation, and the turns after it (bench/compaction.py)
        agents.run(model, args.threads)  # a shared 4,000-token head, 4 conversations at once (bench/agents.py)
        choices.run(model, work.ban, args)     # n = 4 against 4 separate requests (bench/choices.py)
    return 0 if decode_ok else 1


def run_decode_scenes(model: str, engine, work, args) -> bool:
    """Plain decoding, sampled default and the busy machine, each with its guard: False when one fails."""
    decode_ok = decode.run(model, engine, work, args)      # greedy, sampled, default: the guard
    if args.scene:          # some plain-decoding configurations alone
        return decode_ok
    decode_ok &= sampled.run(model, engine, work, args)    # the default against --speculative off and bare
    decode_ok &= busy.run(model, engine, work, args)       # quiet and beside a spinner, llama-server too
    return decode_ok


def print_report(bare: dict, contenders: dict, args) -> None:
    names = list(contenders)
    header = ("measure", "bare engine", *names, "ratio (localserve)", "target")
    ours = contenders["localserve"]
    rows = [
        ("decode tokens/s, 1 stream", f"{bare['decode']:.1f}", *(f"{c['decode']:.1f}" for c in contenders.values()),
         f"{ours['decode_vs_bare']:.3f} x bare", ">= 0.95"),
        ("time to first token, ms", f"{bare['prefill'] * 1000:.1f}",
         *(f"{c['ttft'] * 1000:.1f}" for c in contenders.values()),
         f"{ours['ttft_vs_bare'] * 1000:+.1f} ms vs bare", ""),
    ]
    if not args.quick:
        for n in CONCURRENCY:
            target = ">= 1.5" if n == 4 else ""
            ratio = f"{ours[f'scaling_{n}']:.2f} x 1 stream"
            if n == 4 and "aggregate_4_vs_bare" in ours:
                ratio += f", {ours['aggregate_4_vs_bare']:.2f} x bare"
            bare_cell = f"{bare[f'aggregate_{n}']:.1f} ({bare[f'scaling_{n}']:.2f}x)" if f"aggregate_{n}" in bare else ""
            rows.append((f"aggregate tokens/s, {n} stream{'s' if n > 1 else ''}", bare_cell,
                         *(f"{c[f'aggregate_{n}']:.1f} ({c[f'scaling_{n}']:.2f}x)" for c in contenders.values()),
                         ratio, target))
        floor = bare["second_turn_floor"]
        rows.append(("2nd-turn TTFT, 4 convs, ms", f"{floor * 1000:.1f} (floor)",
                     *(f"{c['second_turn'] * 1000:.1f}" for c in contenders.values()),
                     f"{ours['second_turn_vs_floor']:.2f} x floor", "<= 1.1"))
        rows.append(("peak RSS, MB", "", *(f"{c['peak_rss_mb']:.0f}" for c in contenders.values()), "", ""))
    print_table(header, rows)


if __name__ == "__main__":
    sys.exit(main())
