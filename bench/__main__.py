"""make bench: localserve against the bare engine (and llama-server if present), in one run.

Measures, on the demo model unless --model is given:
- bare engine: single-stream decode tokens/s, prefill time, the "second turn"
  floor (prefilling only the new tokens on top of a resident prefix), and the same
  aggregate workload as the server (up to 4 sequences per batch, as its 4 slots):
  what batching in llama.cpp itself gives on this machine;
- localserve: single-stream tokens/s and time to first token; aggregate tokens/s
  with 1, 2, 4 and 8 concurrent streams; second-turn TTFT with 4 conversations
  interleaved; peak RSS; /health latency under load and during slowloris (latency.py);
- several models (models.py): a cold load through the API against llama.cpp's bare load of
  the same file, and the time to switch between two models with --max-models 1;
- llama-server when it is on PATH, and llama-cpp-python's server when its extras
  are installed, with the same workload;
- embeddings: inputs/s and tokens/s of /v1/embeddings for 256 inputs of ~64 tokens in one
  call and in 8 concurrent calls, against the bare engine (embeddings.py).
Prints one table with the ratios and the targets. Figures are medians over rounds; each
ratio is the median of ratios paired within a round (see measure_server).
"""

from __future__ import annotations

import argparse
import itertools
import os
import shutil
import statistics
import sys
from pathlib import Path

from localserve.engine import cpu_weights

from . import embeddings, latency, models, speculative, weights
from .bare import BareEngine
from .client import concurrent_streams, stream_completion
from .demo import model_or_demo
from .server import LlamaCppPythonServer, LlamaServer, RunningServer

PROMPT = ("The history of computing is a story of people building tools to think with. "
          "From the abacus to the mechanical calculators of the seventeenth century, ") * 3
CONVERSATION = "Conversation {i}: tell me about the rivers, mountains and cities of region {i}. " * 12
FOLLOW_UP = " And now, briefly, what about the weather there in spring and in autumn? " * 2
CONCURRENCY = (1, 2, 4, 8)
SINGLE_PAIRS_PER_ROUND = 3


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench")
    parser.add_argument("--model", help="GGUF model (default: the demo model)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tokens", type=int, default=128, help="tokens generated per stream")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per measurement (medians reported)")
    parser.add_argument("--ctx-size", type=int, default=4096)
    parser.add_argument("--quick", action="store_true", help="single-stream figures only")
    parser.add_argument("--speculative-only", action="store_true",
                        help="only speculative decoding's figures (bench/speculative.py)")
    return parser.parse_args()


class Workload:
    """The token sequences every contender gets, tokenized once by the bare engine."""

    def __init__(self, engine: BareEngine, n_conversations: int = 4):
        self.prompt = engine.tokenize(PROMPT)
        self.conversations = [engine.tokenize(CONVERSATION.format(i=i)) for i in range(n_conversations)]
        self.follow_up = engine.tokenize(FOLLOW_UP)[1:]        # no BOS in the middle
        self.ban = engine.eog_tokens()
        self.texts: dict[tuple, str] = {}          # token prompts as text, for servers that take only text
        self._detokenize = engine.detokenize
        self._markers = itertools.count(100)

    def fresh(self, tokens: list[int]) -> list[int]:
        """tokens with a marker never used before spliced in after BOS: no cache can know it."""
        return [tokens[0], next(self._markers)] + tokens[1:]

    def as_text(self, *token_lists: list[int]) -> None:
        for tokens in token_lists:
            self.texts[tuple(tokens)] = self._detokenize(tokens)


class BareRuns:
    """The floor's measurements, taken between the server's so both see the same machine."""

    def __init__(self, engine: BareEngine, work: Workload, args):
        self.engine, self.work, self.args = engine, work, args
        self.runs: list[tuple[float, float]] = []
        engine.run(work.prompt, 8)                                  # warm-up
        self.floors: list[float] = []
        self.rounds: list[dict[int, float]] = []                   # aggregate tokens/s by stream count

    def once(self, prompt: list[int]) -> None:
        self.runs.append(self.engine.run(prompt, self.args.tokens))

    def first_turns(self, conversations: list[list[int]]) -> None:
        for seq, conv in enumerate(conversations):
            self.engine.resident(seq, conv)

    def floor(self, seq: int, conversation: list[int]) -> float:
        """Seconds to prefill the follow-up on top of the resident conversation in sequence seq."""
        self.floors.append(self.engine.extend(seq, len(conversation), self.work.follow_up))
        return self.floors[-1]

    def aggregate(self, prompts: list[list[int]]) -> float:
        rate = self.engine.aggregate(prompts, self.args.tokens)
        if not self.rounds or len(prompts) in self.rounds[-1]:
            self.rounds.append({})
        self.rounds[-1][len(prompts)] = rate
        return rate

    def result(self) -> dict:
        result = {"prefill": statistics.median(r[0] for r in self.runs),
                  "decode": statistics.median(r[1] for r in self.runs),
                  "second_turn_floor": statistics.median(self.floors) if self.floors else float("nan")}
        for n in CONCURRENCY:
            if self.rounds:
                result[f"aggregate_{n}"] = statistics.median(r[n] for r in self.rounds)
                result[f"scaling_{n}"] = statistics.median(r[n] / r[1] for r in self.rounds)
        return result


def measure_server(server, work: Workload, args, bare: BareRuns | None = None) -> dict:
    """The server's figures; each ratio is the median of ratios within one round.

    A shared machine drifts by more than the differences measured here, so each
    figure is paired with a reference taken right before or after it (the bare
    engine's run, or the same round's single stream) and the pairs' ratios count.
    """
    port = server.port
    ban = {str(t): -100 for t in work.ban}
    base = {"max_tokens": args.tokens, "temperature": 0, "logit_bias": ban}
    if getattr(server, "text_prompts", False):
        base["text_prompts"] = work.texts
    stream_completion(port, {**base, "prompt": work.prompt, "max_tokens": 8})          # warm-up
    singles = []
    # Single streams are short, so they get three times the pairs, and the pairs alternate
    # which side runs first: a machine speeding up or slowing down favours neither.
    for i in range(SINGLE_PAIRS_PER_ROUND * args.repeat):
        prompt = work.fresh(work.prompt)            # the bare run prefills the same tokens
        if bare is not None and i % 2 == 0:
            bare.once(prompt)
        singles.append(stream_completion(port, {**base, "prompt": prompt}))
        if bare is not None and i % 2 == 1:
            bare.once(prompt)
    result = {"ttft": statistics.median(r.ttft for r in singles),
              "decode": statistics.median(r.decode_rate for r in singles)}
    if bare is not None:
        result["decode_vs_bare"] = statistics.median(r.decode_rate / b[1] for r, b in zip(singles, bare.runs))
        result["ttft_vs_bare"] = statistics.median(r.ttft - b[0] for r, b in zip(singles, bare.runs))
    if args.quick:
        return result
    rounds, vs_bare = [], []
    for _ in range(args.repeat):
        rates = {}
        for n in CONCURRENCY:
            prompts = [work.fresh(work.prompt) for _ in range(n)]
            bare_rate = bare.aggregate(prompts) if bare is not None else None
            rates[n] = aggregate_rate(port, base, prompts)
            if bare_rate and n == 4:
                vs_bare.append(rates[n] / bare_rate)
        rounds.append(rates)
    for n in CONCURRENCY:
        result[f"aggregate_{n}"] = statistics.median(r[n] for r in rounds)
        result[f"scaling_{n}"] = statistics.median(r[n] / r[1] for r in rounds)
    if vs_bare:
        result["aggregate_4_vs_bare"] = statistics.median(vs_bare)
    result.update(second_turn(port, base, work, args.repeat, bare))
    result["peak_rss_mb"] = server.peak_rss_mb()
    return result


def aggregate_rate(port: int, base: dict, prompts: list[list[int]]) -> float:
    """Total generated tokens per second with a stream per prompt, all at once (prefill included)."""
    results, elapsed = concurrent_streams(port, base, prompts)
    return sum(r.completion_tokens for r in results) / elapsed


def second_turn(port: int, base: dict, work: Workload, rounds: int, bare: BareRuns | None) -> dict:
    """TTFT of each conversation's second turn, four conversations interleaved.

    Each round uses new conversations (a marker token spliced in), so nothing is
    left over from the last. With `bare`, the engine holds the same four
    conversations and each second turn is paired with the floor for the same
    tokens, the two taken back to back, in alternating order.
    """
    ttfts, ratios = [], []
    for _ in range(rounds):
        conversations = [work.fresh(c) for c in work.conversations]
        for conv in conversations:
            stream_completion(port, {**base, "prompt": conv, "max_tokens": 8})
        if bare is not None:
            bare.first_turns(conversations)
        for seq, conv in enumerate(conversations):
            floor = bare.floor(seq, conv) if bare is not None and seq % 2 == 0 else None
            ttfts.append(stream_completion(port, {**base, "prompt": conv + work.follow_up, "max_tokens": 1}).ttft)
            if bare is not None and floor is None:
                floor = bare.floor(seq, conv)
            if floor is not None:
                ratios.append(ttfts[-1] / floor)
    result = {"second_turn": statistics.median(ttfts)}
    if ratios:
        result["second_turn_vs_floor"] = statistics.median(ratios)
    return result


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
    if args.speculative_only:
        speculative.run(model, engine, work, args)
        engine.close()
        return 0
    contenders = {}
    with RunningServer(model, "--threads", str(args.threads), "--ctx-size", str(args.ctx_size),
                       "--slots", "4") as server:
        # bare and server runs alternate: a shared machine's drift hits both alike
        contenders["localserve"] = measure_server(server, work, args, bare=bare_runs)
    bare = bare_runs.result()
    if shutil.which("llama-server") and not args.quick:
        with LlamaServer(model, args.threads, args.ctx_size, slots=4) as server:
            contenders["llama-server"] = measure_server(server, work, args)
    if LlamaCppPythonServer.available() and not args.quick:
        with LlamaCppPythonServer(model, args.threads, args.ctx_size) as server:
            contenders["llama-cpp-python"] = measure_server(server, work, args)
    print_report(bare, contenders, args)
    speculative.run(model, engine, work, args)     # the four ratios and their chart
    engine.close()
    weights.print_table(model, args)   # the chosen CPU weight layout against use_extra_bufts = False
    embeddings.run(model, args)         # /v1/embeddings against the bare engine (bench/embeddings.py)
    if not args.quick:
        latency.run(model, args)        # /health under load and during slowloris (bench/latency.py)
        models.run(model, args)         # cold load and model switches against a bare load (bench/models.py)
    return 0


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
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    rule = "  ".join("-" * w for w in widths)
    print(rule)
    print("  ".join(str(h).ljust(w) for h, w in zip(header, widths)))
    print(rule)
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    print(rule)


if __name__ == "__main__":
    sys.exit(main())
