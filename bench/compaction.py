"""Context compaction's figures (docs/performance.rst, docs/compaction.rst): what a compaction costs, and what it buys.

- compaction against one generation: POST /v1/responses/compact on a long conversation, against a
  plain /v1/responses on the same conversation generating as many tokens as the summary took (its
  end-of-generation tokens banned). Each pair starts from a conversation no cache has seen (a new
  marker in front), the two alternate which goes first, and the ratio is the median of the pairs'.
- the second turn's time to first token after a compaction, against the same turn without it:
  without, the long conversation answered then one more user message (its prefix cached); after,
  the compact output (the kept user messages and the compaction item) then the same message, and
  a third turn on that short prefix, now cached.

Part of ``make bench`` (after the main table); run alone with
``python -m bench.compaction [--model PATH] [--repeat N] [--tokens N]``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys

from .client import post_streaming, read_stream
from .demo import model_or_demo
from .server import RunningServer
from .table import print_table

TURN = ("The lighthouse keeper wrote down every ship that passed, its flag, its cargo and the hour, "
        "and kept the pages in a tin box under the stairs. ")
TURNS = 12                    # user and assistant turns of the long conversation
FOLLOW_UP = "What did the keeper keep under the stairs?"
_markers = itertools.count(1)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench.compaction")
    parser.add_argument("--model", help="GGUF model (default: Gemma 3 270M)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tokens", type=int, default=128, help="--compact-max-tokens: the longest summary")
    parser.add_argument("--repeat", type=int, default=5, help="rounds per measurement (medians reported)")
    parser.add_argument("--ctx-size", type=int, default=4096)
    parser.add_argument("--turn-repeat", type=int, default=TURN_REPEAT, help="copies of the turn text in each turn")
    return parser.parse_args()


def conversation(marker: int, repeat: int) -> list[dict]:
    """A long conversation, opened by a marker no cache has seen."""
    items = [{"role": "user", "content": f"[{marker}] " + TURN * repeat}]
    for i in range(TURNS - 1):
        items.append({"role": "assistant" if i % 2 == 0 else "user", "content": TURN * repeat})
    return items


def post(port: int, path: str, body: dict) -> tuple[float, float, dict | None]:
    """(seconds to the first output text or the end, seconds to the end, the final JSON or the last
    Responses object streamed)."""
    buffer, first, total = read_stream(*post_streaming(port, path, body),
                                       lambda seen: b"response.output_text.delta" in seen)
    head, _, payload = buffer.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"{path}: {head.splitlines()[0].decode()} {payload[:300]!r}")
    if not body.get("stream"):
        return total, total, json.loads(_unchunked(head, payload))
    completed = [line for line in buffer.split(b"\n")
                 if line.startswith(b"data: {") and b'"response.completed"' in line]
    final = json.loads(completed[-1][6:])["response"] if completed else None
    return first, total, final


def _unchunked(head: bytes, payload: bytes) -> bytes:
    if b"chunked" not in head.lower():
        return payload
    out, rest = b"", payload
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2:]
    return out


def compaction_against_generation(port: int, args, ban: dict) -> tuple[float, float, int, float]:
    """Medians of (compaction seconds, generation seconds, summary tokens) and of the ratio."""
    compactions, generations, ratios, lengths = [], [], [], []
    tokens = args.tokens            # the first round's generation: the longest summary; then the last one's

    def compaction() -> float:
        nonlocal tokens
        _, seconds, answer = post(port, "/v1/responses/compact",
                                  {"model": "bench", "input": conversation(next(_markers), args.turn_repeat)})
        tokens = max(1, answer["usage"]["output_tokens"])
        return seconds

    def generation() -> float:
        body = {"model": "bench", "input": conversation(next(_markers), args.turn_repeat), "store": False,
                "max_output_tokens": tokens, "logit_bias": ban, "temperature": 0}
        return post(port, "/v1/responses", body)[1]

    for round_ in range(args.repeat):
        if round_ % 2:       # alternate which goes first: a drifting machine favours neither
            generated = generation()
            compacted = compaction()
        else:
            compacted = compaction()
            generated = generation()
        compactions.append(compacted)
        generations.append(generated)
        ratios.append(compacted / generated)
        lengths.append(tokens)
    return statistics.median(compactions), statistics.median(generations), int(statistics.median(lengths)), \
        statistics.median(ratios)


def second_turn_ttft(port: int, args) -> tuple[float, float, float]:
    """Medians of the second turn's TTFT without a compaction, after one, and the turn after that."""
    without, after, third = [], [], []
    for _ in range(args.repeat):
        history = conversation(next(_markers), args.turn_repeat)
        options = {"model": "bench", "stream": True, "store": False, "max_output_tokens": 8, "temperature": 0}
        post(port, "/v1/responses", {**options, "input": history})               # turn 1: its prefix cached
        follow_up = [*history, {"role": "user", "content": FOLLOW_UP}]
        ttft, _, _ = post(port, "/v1/responses", {**options, "input": follow_up})
        without.append(ttft)
        _, _, compact = post(port, "/v1/responses/compact", {"model": "bench", "input": history})
        short = [*compact["output"], {"role": "user", "content": FOLLOW_UP}]
        ttft, _, final = post(port, "/v1/responses", {**options, "input": short})
        after.append(ttft)
        answered = [item for item in (final or {}).get("output", []) if item.get("type") == "message"]
        turn3 = [*short, *answered, {"role": "user", "content": "And then?"}]
        ttft, _, _ = post(port, "/v1/responses", {**options, "input": turn3})
        third.append(ttft)
    return statistics.median(without), statistics.median(after), statistics.median(third)


TURN_REPEAT = 4        # copies of the turn text in each turn (--turn-repeat)


def run(model: str, args) -> None:
    args = argparse.Namespace(**{"turn_repeat": TURN_REPEAT, **vars(args)})
    with RunningServer(model, "--model-id", "bench", "--threads", str(args.threads), "--ctx-size",
                       str(args.ctx_size), "--slots", "1", "--compact-max-tokens", str(args.tokens),
                       "--no-store") as server:
        ban = _eog_ban(server.port)
        compacting, generating, length, ratio = compaction_against_generation(server.port, args, ban)
        without, after, third = second_turn_ttft(server.port, args)
    rows = [("compaction, ms", f"{compacting * 1000:.0f}", f"{length} summary tokens; {ratio:.2f} x one generation"),
            ("one generation of as many tokens, ms", f"{generating * 1000:.0f}", "the same conversation, uncached"),
            ("2nd-turn TTFT without compaction, ms", f"{without * 1000:.1f}", "long prefix, cached"),
            ("2nd-turn TTFT after compaction, ms", f"{after * 1000:.1f}", f"{after / without:.2f} x without"),
            ("3rd-turn TTFT after compaction, ms", f"{third * 1000:.1f}", f"{third / without:.2f} x without")]
    print_table(("measure", "median", "note"), rows, title="Context compaction (bench/compaction.py)")


def _eog_ban(port: int) -> dict:
    """The end-of-generation tokens as a logit_bias that bans them (every answer is as long as asked)."""
    from urllib.request import urlopen
    with urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as answer:
        meta = json.loads(answer.read())["data"][0].get("meta") or {}
    return {str(t): -100 for t in meta.get("eog_tokens", [])}


def main() -> int:
    args = parse_args()
    model = model_or_demo(args.model)
    if model is None:
        return 2
    print(f"model {os.path.basename(model)}, {args.threads} threads, summaries up to {args.tokens} tokens, "
          f"median of {args.repeat}", flush=True)
    run(model, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
