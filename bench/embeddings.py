"""Embeddings throughput: localserve's /v1/embeddings against the bare engine, in the same run.

Two workloads, the same token sequences for both sides (~64 tokens each, 56 to 72):
- one call of 256 inputs;
- 8 concurrent calls of 32 inputs.
The bare engine (bare_embed.py: llama.cpp's calls, nothing of localserve) embeds the same
sequences packed in order into batches of the server's size (--batch-size tokens, at most 128
sequences): the server packs the inputs of concurrent calls together, so both workloads are
the same 256 sequences to it. Rounds alternate which side runs first; each ratio is the median
of ratios paired within a round. Target: >= 0.95 x the bare engine.
Vectors travel as base64, what the openai SDK asks for by default.

Run alone with ``python -m bench.embeddings [--model PATH]``; ``make bench`` runs it after the
throughput table.
"""

from __future__ import annotations

import json
import socket
import statistics
import sys
import threading
import time

from localserve.engine import cpu_weights

from . import table
from .bare_embed import BareEmbedder
from .server import RunningServer
from .versus_bare import ratio, standalone

N_INPUTS = 256
CALLS = 8
BATCH_TOKENS = 512          # the server's default --batch-size
MAX_SEQS = 128              # localserve.engine.embed.EMBEDDING_MAX_SEQS
TARGET = 0.95
MAX_ROUNDS = 3              # in make bench (python -m bench.embeddings --repeat N takes N)
TEXT = ("Retrieval needs vectors: each passage of a document is embedded once, stored, and compared "
        "with the embedding of every question that comes later. ") * 4


def workload(bare: BareEmbedder) -> list[list[int]]:
    base = bare.tokenize(TEXT, add_special=False, parse_special=False)
    return [base[i % 17:i % 17 + 56 + i % 17] for i in range(N_INPUTS)]


def post_embeddings(port: int, inputs: list[list[int]]) -> int:
    """One call; the number of vectors that came back."""
    payload = json.dumps({"model": "bench", "input": inputs, "encoding_format": "base64"}).encode()
    head = (f"POST /v1/embeddings HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=600) as sock:
        sock.sendall(head + payload)
        chunks = []
        while data := sock.recv(1 << 20):
            chunks.append(data)
    raw = b"".join(chunks)
    status = raw.split(b" ", 2)[1]
    if status != b"200":
        raise RuntimeError(f"/v1/embeddings answered {raw[:300]!r}")
    return len(json.loads(raw.split(b"\r\n\r\n", 1)[1])["data"])


def server_seconds(port: int, calls: list[list[list[int]]]) -> float:
    counts = [0] * len(calls)

    def one(i: int) -> None:
        counts[i] = post_embeddings(port, calls[i])

    started = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    assert counts == [len(c) for c in calls], counts
    return elapsed


def bare_seconds(bare: BareEmbedder, sequences: list[list[int]]) -> float:
    started = time.perf_counter()
    bare.embed(sequences)
    return time.perf_counter() - started


def measure(model: str, threads: int, repeat: int) -> dict:
    bare = BareEmbedder(model, n_batch=BATCH_TOKENS, n_seq=MAX_SEQS, threads=threads, pooling=None,
                        weights=cpu_weights.plan(model, "auto"))
    sequences = workload(bare)
    n_tokens = sum(len(s) for s in sequences)
    shapes = {"256 inputs, 1 call": [sequences],
              f"{CALLS} calls of {N_INPUTS // CALLS}": [sequences[i::CALLS] for i in range(CALLS)]}
    results: dict[str, dict] = {}
    with RunningServer(model, "--threads", str(threads), "--batch-size", str(BATCH_TOKENS)) as server:
        server_seconds(server.port, [sequences[:8]])        # warm-up: the embedding context is made here
        bare_seconds(bare, sequences[:8])
        for name, calls in shapes.items():
            ours, floor, ratios = [], [], []
            for r in range(repeat):
                if r % 2 == 0:
                    floor.append(bare_seconds(bare, [s for call in calls for s in call]))
                ours.append(server_seconds(server.port, calls))
                if r % 2 == 1:
                    floor.append(bare_seconds(bare, [s for call in calls for s in call]))
                ratios.append(floor[-1] / ours[-1])
            results[name] = {"bare": statistics.median(floor), "ours": statistics.median(ours),
                             "ratio": statistics.median(ratios)}
    bare.close()
    return {"n_tokens": n_tokens, "shapes": results}


def print_table(result: dict) -> None:
    n_tokens = result["n_tokens"]
    header = ("embeddings (256 x ~64 tokens)", "bare inputs/s", "bare tokens/s", "localserve inputs/s",
              "localserve tokens/s", "ratio", "target")
    rows = []
    for name, r in result["shapes"].items():
        rows.append((name, f"{N_INPUTS / r['bare']:.1f}", f"{n_tokens / r['bare']:.0f}",
                     f"{N_INPUTS / r['ours']:.1f}", f"{n_tokens / r['ours']:.0f}",
                     ratio(r["ratio"]), f">= {TARGET}"))
    table.print_table(header, rows)


def run(model: str, args) -> None:
    # a generative model runs its output layer for every token it embeds (Gemma 3 270M's is
    # 262k wide): a round takes minutes on a small box, so make bench takes at most three
    print_table(measure(model, args.threads, min(args.repeat, MAX_ROUNDS)))


def main() -> int:
    return standalone("bench.embeddings", lambda model, args, _: print_table(measure(model, args.threads, args.repeat)))


if __name__ == "__main__":
    sys.exit(main())
