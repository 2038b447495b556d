"""The single-stream and 4-stream rows through Ollama's /api/chat, beside the same rows through
/v1/chat/completions on the same server in the same run (issue 31: within 2%).

Both endpoints get the same message (a marker never used before in front, so no cache knows
it), greedy sampling, the end-of-generation tokens banned (every answer is --tokens long), and
they alternate which goes first within each pair: a machine drifting favours neither. Each
ratio is the median of the pairs' ratios (/api/chat over /v1/chat/completions).
"""

from __future__ import annotations

import itertools
import json
import statistics
import threading
import time

from .client import StreamResult, post_streaming, read_stream
from .server import RunningServer
from .table import print_table

MESSAGE = ("Write a long and detailed story about a lighthouse keeper who finds a message in a bottle, "
           "with every chapter named and every character described.")
STREAMS = 4
SINGLE_PAIRS_PER_ROUND = 3
_markers = itertools.count(1)


def run(model: str, ban: list[int], args) -> None:
    with RunningServer(model, "--threads", str(args.threads), "--ctx-size", str(args.ctx_size),
                       "--slots", str(STREAMS)) as server:
        rows = measure(server.port, ban, args)
    print_table(("measure", "/v1/chat/completions", "/api/chat", "ratio", "target"), rows,
                title="Ollama's /api/chat against /v1/chat/completions (bench/ollama_chat.py)")


def measure(port: int, ban: list[int], args) -> list[tuple]:
    bias = {str(t): -100 for t in ban}
    openai = {"max_tokens": args.tokens, "temperature": 0, "logit_bias": bias}
    ollama = {"options": {"num_predict": args.tokens, "temperature": 0, "logit_bias": bias}}
    chat_stream(port, "/v1/chat/completions", {**openai, "max_tokens": 8})     # warm-up
    singles: dict[str, list[StreamResult]] = {"openai": [], "ollama": []}
    for i in range(SINGLE_PAIRS_PER_ROUND * args.repeat):
        order = ("openai", "ollama") if i % 2 == 0 else ("ollama", "openai")
        for side in order:
            base = openai if side == "openai" else ollama
            path = "/v1/chat/completions" if side == "openai" else "/api/chat"
            singles[side].append(chat_stream(port, path, base))
    rates = {side: [r.decode_rate for r in runs] for side, runs in singles.items()}
    rows = [row("decode tokens/s, 1 stream", rates["openai"], rates["ollama"])]
    ttfts = {side: [r.ttft * 1000 for r in runs] for side, runs in singles.items()}
    rows.append(row("time to first token, ms", ttfts["openai"], ttfts["ollama"], target="<= 1.02"))
    aggregate: dict[str, list[float]] = {"openai": [], "ollama": []}
    for i in range(args.repeat):
        order = ("openai", "ollama") if i % 2 == 0 else ("ollama", "openai")
        for side in order:
            base = openai if side == "openai" else ollama
            path = "/v1/chat/completions" if side == "openai" else "/api/chat"
            aggregate[side].append(concurrent_rate(port, path, base, STREAMS))
    rows.append(row(f"aggregate tokens/s, {STREAMS} streams", aggregate["openai"], aggregate["ollama"]))
    return rows


def row(name: str, openai: list[float], ollama: list[float], target: str = ">= 0.98") -> tuple:
    ratio = statistics.median(b / a for a, b in zip(openai, ollama) if a > 0)
    return (name, f"{statistics.median(openai):.1f}", f"{statistics.median(ollama):.1f}", f"{ratio:.3f}", target)


def concurrent_rate(port: int, path: str, base: dict, n: int) -> float:
    results: list[StreamResult | None] = [None] * n

    def one(i: int) -> None:
        results[i] = chat_stream(port, path, base)

    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(r.completion_tokens for r in results) / (time.perf_counter() - started)


def chat_stream(port: int, path: str, base: dict) -> StreamResult:
    """One streamed chat on raw sockets: when its first text came, when it ended, how many tokens."""
    ollama = path == "/api/chat"
    body = {**base, "model": "bench", "stream": True,
            "messages": [{"role": "user", "content": f"[{next(_markers)}] {MESSAGE}"}]}
    if not ollama:
        body["stream_options"] = {"include_usage": True}
    first_text = b'"content":"' if ollama else b'"delta":{"content":"'
    end_mark = b'"done":true' if ollama else b"data: [DONE]"
    buffer, ttft, total = read_stream(*post_streaming(port, path, body), lambda seen: has_text(seen, first_text),
                                      end_mark)
    tokens = eval_count(buffer) if ollama else usage_tokens(buffer)
    return StreamResult(ttft, total, tokens, 0)


def has_text(buffer: bytes, marker: bytes) -> bool:
    at = buffer.find(marker)
    while at >= 0:
        if buffer[at + len(marker):at + len(marker) + 1] not in (b'"', b""):
            return True
        at = buffer.find(marker, at + 1)
    return False


def eval_count(buffer: bytes) -> int:
    for line in reversed(buffer.split(b"\n")):
        if line.startswith(b"{") and b'"done":true' in line:
            return json.loads(line)["eval_count"]
    raise RuntimeError(f"/api/chat ended without its last line: {buffer[-300:]!r}")


def usage_tokens(buffer: bytes) -> int:
    for line in buffer.split(b"\n"):
        if line.startswith(b"data: {") and b'"usage"' in line and b'"choices":[]' in line:
            return json.loads(line[6:])["usage"]["completion_tokens"]
    raise RuntimeError(f"/v1/chat/completions sent no usage: {buffer[-300:]!r}")
