"""The single-stream and 4-stream rows of the other dialects' own routes beside OpenAI's route for
the same work, on the same server in the same run: Ollama's /api/chat against
/v1/chat/completions (issue 31), llama-server's /completion against /v1/completions (issue 45);
each within 2%.

Both routes of a pair get the same prompt (a marker never used before in front, so no cache
knows it), greedy sampling, the end-of-generation tokens banned (every answer is --tokens long),
and they alternate which goes first within each pair of runs: a machine drifting favours
neither. Each ratio is the median of the runs' ratios (the other route over OpenAI's).
"""

from __future__ import annotations

import itertools
import json
import statistics
import threading
import time
from pathlib import Path
from collections.abc import Callable

from .client import StreamResult, post_streaming, read_stream
from .server import RunningServer
from .table import print_table

MESSAGE = ("Write a long and detailed story about a lighthouse keeper who finds a message in a bottle, "
           "with every chapter named and every character described.")
STREAMS = 4
SINGLE_PAIRS_PER_ROUND = 3
CHUNKED_END = b"\r\n0\r\n\r\n"      # the last chunk: a stream with no closing line of its own has ended
_markers = itertools.count(1)
_model: list[str] = []          # the model file served (its name is the model's name on /api/chat)

Streamer = Callable[[int], StreamResult]     # one streamed answer from the server on this port


def run(model: str, ban: list[int], args) -> None:
    _model[:] = [model]
    with RunningServer(model, "--threads", str(args.threads), "--ctx-size", str(args.ctx_size),
                       "--slots", str(STREAMS)) as server:
        rows = measure(server.port, ban, args)
    print_table(("measure", "OpenAI's route", "the other route", "ratio", "target"), rows,
                title="The dialects' own routes against OpenAI's (bench/ollama_chat.py)")


def measure(port: int, ban: list[int], args) -> list[tuple]:
    bias = {str(t): -100 for t in ban}
    chat = {"max_tokens": args.tokens, "temperature": 0, "logit_bias": bias}
    ollama = {"options": {"num_predict": args.tokens, "temperature": 0, "logit_bias": bias}}
    llama = {"n_predict": args.tokens, "temperature": 0, "logit_bias": [[t, False] for t in ban]}
    pairs = {
        "/api/chat : /v1/chat/completions": (lambda p: chat_stream(p, "/v1/chat/completions", chat),
                                             lambda p: chat_stream(p, "/api/chat", ollama)),
        "/completion : /v1/completions": (lambda p: completion_stream(p, "/v1/completions", chat),
                                          lambda p: completion_stream(p, "/completion", llama)),
    }
    chat_stream(port, "/v1/chat/completions", {**chat, "max_tokens": 8})     # warm-up
    rows = []
    for name, (openai, other) in pairs.items():
        if args.scene and args.scene not in name.split(" : ")[0]:     # --scene /completion: that pair alone
            continue
        rows += compare(port, name, openai, other, args.repeat)
    return rows


def compare(port: int, name: str, openai: Streamer, other: Streamer, repeat: int) -> list[tuple]:
    """The single-stream rows (decode rate, time to first token) and the aggregate row of one pair."""
    sides = {"openai": openai, "other": other}
    singles: dict[str, list[StreamResult]] = {"openai": [], "other": []}
    for i in range(SINGLE_PAIRS_PER_ROUND * repeat):
        for side in ("openai", "other") if i % 2 == 0 else ("other", "openai"):
            singles[side].append(sides[side](port))
    rates = {side: [r.decode_rate for r in runs] for side, runs in singles.items()}
    ttfts = {side: [r.ttft * 1000 for r in runs] for side, runs in singles.items()}
    aggregate: dict[str, list[float]] = {"openai": [], "other": []}
    for i in range(repeat):
        for side in ("openai", "other") if i % 2 == 0 else ("other", "openai"):
            aggregate[side].append(concurrent_rate(port, sides[side], STREAMS))
    return [row(f"{name}: decode tokens/s, 1 stream", rates["openai"], rates["other"]),
            row(f"{name}: time to first token, ms", ttfts["openai"], ttfts["other"], target="<= 1.02"),
            row(f"{name}: aggregate tokens/s, {STREAMS} streams", aggregate["openai"], aggregate["other"])]


def row(name: str, openai: list[float], other: list[float], target: str = ">= 0.98") -> tuple:
    ratio = statistics.median(b / a for a, b in zip(openai, other) if a > 0)
    return (name, f"{statistics.median(openai):.1f}", f"{statistics.median(other):.1f}", f"{ratio:.3f}", target)


def concurrent_rate(port: int, stream: Streamer, n: int) -> float:
    results: list[StreamResult | None] = [None] * n

    def one(i: int) -> None:
        results[i] = stream(port)

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
    # Ollama's routes answer 404 for a name the server does not serve: the model file's own name
    body = {**base, "model": Path(_model[0]).stem if ollama else "bench", "stream": True,
            "messages": [{"role": "user", "content": f"[{next(_markers)}] {MESSAGE}"}]}
    if not ollama:
        body["stream_options"] = {"include_usage": True}
    first_text = b'"content":"' if ollama else b'"delta":{"content":"'
    end_mark = b'"done":true' if ollama else b"data: [DONE]"
    buffer, ttft, total = read_stream(*post_streaming(port, path, body), lambda seen: has_text(seen, first_text),
                                      end_mark)
    tokens = eval_count(buffer) if ollama else usage_tokens(buffer)
    return StreamResult(ttft, total, tokens, 0)


def completion_stream(port: int, path: str, base: dict) -> StreamResult:
    """One streamed completion of a raw prompt: /v1/completions' text chunks and usage, or
    /completion's content lines and its last object (no [DONE]: the stream's last chunk ends it)."""
    llama = path == "/completion"
    body = {**base, "model": "bench", "stream": True, "prompt": f"[{next(_markers)}] {MESSAGE}"}
    if not llama:
        body["stream_options"] = {"include_usage": True}
    first_text = b'"content":"' if llama else b'"text":"'
    end_mark = CHUNKED_END if llama else b"data: [DONE]"
    buffer, ttft, total = read_stream(*post_streaming(port, path, body), lambda seen: has_text(seen, first_text),
                                      end_mark)
    tokens = tokens_predicted(buffer) if llama else usage_tokens(buffer)
    return StreamResult(ttft, total, tokens, 0)


def tokens_predicted(buffer: bytes) -> int:
    for line in reversed(buffer.split(b"\n")):
        if line.startswith(b"data: {") and b'"stop":true' in line:
            return json.loads(line[6:])["tokens_predicted"]
    raise RuntimeError(f"/completion ended without its last object: {buffer[-300:]!r}")


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
    raise RuntimeError(f"the OpenAI stream sent no usage: {buffer[-300:]!r}")
