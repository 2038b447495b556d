"""The agent workload for `make bench`: a long shared head, several conversations at once (issue 35).

A coding agent sends the same ~4,000-token head (system prompt and tool definitions) on every
request and runs conversations side by side (subagents, parallel tasks). Here: 4 conversations
of 3 turns each, all 4 at once; each turn is the last prompt, the answer it got and a new user
message, streamed through /v1/completions as token ids. Measured per contender: prompt tokens
computed in all (what the server did not take from its cache) and the wall time until the last
of the 4 first turns had its first token (the cold head: computed once, or 4 times).

Contenders: localserve (prefix sharing on: heads copied as data between KV streams), the same with
--kv-unified (heads' cells owned together), localserve --no-prefix-sharing, the bare engine
computing the head once and copying it into the 4 sequences (llama_memory_seq_cp on a unified
KV cache, then the 4 first-turn suffixes in one batch: the floor), and llama-server with 4 slots
when it is on PATH. Targets: tokens computed <= 1.1 x one conversation's, the wall time <= 1.2 x
the bare engine's. A shared machine drifts by more than that gap, so the floor (warmed up first)
runs right before and after each contender and the contender's ratio is to their mean.

    python -m bench.agents [--model PATH] [--threads N] [--tokens N] [--head N] [--smoke | --quick]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from typing import Callable

from llama_cpp import llama_cpp as ll

from localserve.engine import cpu_weights

from .bare import BareEngine
from .client import stream_completion
from .demo import model_or_demo
from .server import LlamaServer, RunningServer
from .table import print_table

CONVERSATIONS = 4
TURNS = 3
HEAD_TOKENS = 4000
TOOL = ("Tool {i}: edit_file(path: string, old: string, new: string) replaces the first occurrence of old "
        "with new in the file at path; it fails when old does not occur exactly once. ")
SYSTEM = "You are a coding agent working in a repository. Read before you edit; run the tests after. "
USER = "Conversation {c}, turn {t}: look at module_{c}_{t}.py and fix the failing test in it, please. "
TOKENS_TARGET = 1.1
WALL_TARGET = 1.2


def head(engine: BareEngine, limit: int) -> list[int]:
    tokens, i = engine.tokenize(SYSTEM), 0
    while len(tokens) < limit:
        tokens += engine.tokenize(TOOL.format(i=i))[1:]     # no BOS in the middle
        i += 1
    return tokens[:limit]


def run_conversations(port: int, shared: list[int], user: list[list[list[int]]], n_new: int, ban: list[int],
                      tokenize: Callable[[str], list[int]]) -> tuple[int, float, float]:
    """(prompt tokens computed, seconds to the last first turn's first token, seconds in all)."""
    computed, firsts = [0] * CONVERSATIONS, [0.0] * CONVERSATIONS
    started = time.perf_counter()

    def conversation(c: int) -> None:
        prompt = list(shared)
        for t in range(TURNS):
            prompt += user[c][t]
            body = {"prompt": prompt, "max_tokens": n_new, "temperature": 0,
                    "logit_bias": {str(token): -100 for token in ban}}
            result = stream_completion(port, body, collect_text=True)
            computed[c] += len(prompt) - result.cached_tokens
            if t == 0:
                firsts[c] = time.perf_counter() - started - (result.total - result.ttft)
            prompt += tokenize(result.text)

    threads = [threading.Thread(target=conversation, args=(c,)) for c in range(CONVERSATIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(computed), max(firsts), time.perf_counter() - started


def bare_floor(engine: BareEngine, shared: list[int], user: list[list[list[int]]]) -> tuple[int, float]:
    """The head once into sequence 0, copied into the others, the 4 first-turn suffixes in one batch."""
    ll.llama_memory_clear(engine.memory, True)
    started = time.perf_counter()
    engine.resident(0, shared)
    for seq in range(1, CONVERSATIONS):
        ll.llama_memory_seq_cp(engine.memory, 0, seq, 0, len(shared))
    entries = [(token, len(shared) + i, c, i == len(user[c][0]) - 1)
               for c in range(CONVERSATIONS) for i, token in enumerate(user[c][0])]
    for i in range(0, len(entries), engine.n_batch):
        engine._decode_entries(entries[i:i + engine.n_batch])
    wall = time.perf_counter() - started
    suffixes = sum(len(u) for turns in user for u in turns)
    return len(shared) + suffixes, wall


def run(model: str, threads: int, n_new: int = 32, head_tokens: int = HEAD_TOKENS, smoke: bool = False,
        quick: bool = False) -> None:
    ctx = head_tokens + 2048
    engine = BareEngine(model, n_ctx=ctx, threads=threads, n_seq=CONVERSATIONS, unified=True,
                        weights=cpu_weights.plan(model, "auto"))

    def tokenize(text: str) -> list[int]:       # an answer's text, as the next turn's prompt has it
        return engine.tokenize(text)[1:]

    shared = head(engine, head_tokens)
    user = [[engine.tokenize(USER.format(c=c, t=t))[1:] for t in range(TURNS)] for c in range(CONVERSATIONS)]
    one_conversation = len(shared) + sum(len(u) for u in user[0])
    ban = engine.ban.tolist()
    # The machine drifts by more than the gap measured, so the floor is taken right before and after
    # each contender and the contender's ratio is to the mean of those two (the floor row: their median).
    engine.resident(0, shared[:engine.n_batch])     # warmed up as the server is at load: no first-call costs
    floors, rows = [bare_floor(engine, shared, user)], {}
    runs = [("localserve", ()), ("localserve --kv-unified", ("--kv-unified",)),
            ("localserve, sharing off", ("--no-prefix-sharing",))]
    for name, extra in runs[:1] if smoke or quick else runs:
        with RunningServer(model, "--threads", str(threads), "--ctx-size", str(ctx), "--slots",
                           str(CONVERSATIONS), "--no-store", *extra) as server:
            rows[name] = run_conversations(server.port, shared, user, n_new, ban, tokenize)
        floors.append(bare_floor(engine, shared, user))
    if LlamaServer.available() and not (smoke or quick):
        with LlamaServer(model, threads, ctx, slots=CONVERSATIONS) as server:
            rows["llama-server"] = run_conversations(server.port, shared, user, n_new, ban, tokenize)
        floors.append(bare_floor(engine, shared, user))
    engine.close()
    bare_tokens, bare_wall = floors[0][0], statistics.median(wall for _, wall in floors)
    print(f"agent workload: {len(shared)}-token head, {CONVERSATIONS} conversations x {TURNS} turns, "
          f"{n_new} tokens per answer; one conversation's prompt tokens: {one_conversation}")
    table = [("bare engine (head once, seq_cp)", str(bare_tokens), "", f"{bare_wall:.2f}", "", "")]
    for i, (name, (computed, last_first, total)) in enumerate(rows.items()):
        around = (floors[i][1] + floors[i + 1][1]) / 2      # the floor runs right before and after this one
        table.append((name, str(computed), f"{computed / one_conversation:.2f} x", f"{last_first:.2f}",
                      f"{last_first / around:.2f} x", f"{total:.2f}"))
    print_table(("contender", "prompt tokens computed", "vs one conversation", "s to last first token",
                 "vs bare (runs around it)", "s in all"), table)
    print(f"bare engine runs: {', '.join(f'{wall:.2f}' for _, wall in floors)} s")
    print(f"targets: tokens computed <= {TOKENS_TARGET} x one conversation's; "
          f"time to the last first token <= {WALL_TARGET} x the bare engine's", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench.agents")
    parser.add_argument("--model", help="GGUF model (default: Gemma 3 270M)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--tokens", type=int, default=32, help="tokens generated per turn")
    parser.add_argument("--head", type=int, default=HEAD_TOKENS, help="tokens of the shared head")
    parser.add_argument("--smoke", action="store_true", help="localserve alone, a 256-token head: does it run")
    parser.add_argument("--quick", action="store_true", help="localserve and the bare engine alone (while iterating)")
    args = parser.parse_args()
    model = model_or_demo(args.model)
    if model is None:
        return 2
    run(model, args.threads, args.tokens, 256 if args.smoke else args.head, args.smoke, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
