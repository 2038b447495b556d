"""Several choices of one request (issue 51): `n = 4` against 4 separate requests.

One prompt of PROMPT_TOKENS tokens, 4 sampled answers of --tokens tokens each (end tokens banned,
so every answer runs to its length), through /v1/completions:
- "n = 4": one request; the server computes the prompt once, copies it into 3 more sequences and
  decodes the 4 choices in one batch;
- "4 requests, one after another": what a client without `n` does in a loop (the 2nd to 4th find
  the prompt in their slot);
- "4 requests at once": the same 4 requests in parallel (the server computes the shared head once
  and the others wait for it: runtime/placement.py).
Each round gives each contender a prompt of its own (the same length), so no contender finds
another's prompt cached; the ratios are paired within a round, medians over rounds. Prompt tokens
computed come from /metrics. Target: n = 4 takes <= 0.6 x the time of 4 requests one after another.

    python -m bench --choices-only [--model PATH] [--tokens N] [--repeat N]
"""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time

from .server import RunningServer
from .table import print_table

CHOICES = 4
PROMPT_TOKENS = 512
TARGET = 0.6
FILLER = ("The river runs past the mill and the old stone bridge, where the town keeps its market on "
          "Thursdays and the children watch the boats go by. ")


def post(port: int, path: str, body: dict) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        response = conn.getresponse()
        answer = json.loads(response.read())
        if response.status != 200:
            raise RuntimeError(f"{path}: {response.status} {answer}")
        return answer
    finally:
        conn.close()


def prefilled(port: int) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    return sum(float(line.split()[-1]) for line in text.splitlines()
               if line.startswith("localserve_prefilled_tokens_total"))


def prompt_tokens(port: int, label: str) -> list[int]:
    """PROMPT_TOKENS tokens that begin with `label`: no other prompt of the run shares more than BOS."""
    tokens = post(port, "/tokenize", {"content": label + " " + FILLER * 40, "add_special": True})["tokens"]
    return tokens[:PROMPT_TOKENS]


def contenders(port: int, body: dict) -> dict:
    def n4(prompt: list[int]) -> None:
        answer = post(port, "/v1/completions", {**body, "prompt": prompt, "n": CHOICES})
        assert len(answer["choices"]) == CHOICES

    def one_after_another(prompt: list[int]) -> None:
        for i in range(CHOICES):
            post(port, "/v1/completions", {**body, "prompt": prompt, "seed": body["seed"] + i})

    def at_once(prompt: list[int]) -> None:
        threads = [threading.Thread(target=post, args=(port, "/v1/completions",
                                                       {**body, "prompt": prompt, "seed": body["seed"] + i}))
                   for i in range(CHOICES)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    return {"n = 4": n4, "4 requests, one after another": one_after_another, "4 requests at once": at_once}


def run(model: str, ban: list[int], args) -> bool:
    """The table, and whether n = 4 met its target; `ban`: the model's end tokens."""
    with RunningServer(model, "--threads", str(args.threads), "--ctx-size", str(args.ctx_size), "--slots",
                       str(CHOICES), "--no-store") as server:
        body = {"max_tokens": args.tokens, "temperature": 0.8, "seed": 11,
                "logit_bias": {str(int(token)): -100 for token in ban}}
        runs = contenders(server.port, body)
        walls: dict[str, list[float]] = {name: [] for name in runs}
        computed: dict[str, list[float]] = {name: [] for name in runs}
        for r in range(args.repeat):
            for name, contender in runs.items():
                prompt = prompt_tokens(server.port, f"Round {r} of {name}:")
                before = prefilled(server.port)
                started = time.perf_counter()
                contender(prompt)
                walls[name].append(time.perf_counter() - started)
                computed[name].append(prefilled(server.port) - before)
    ours = walls["n = 4"]
    rows = []
    for name in runs:
        ratio = statistics.median(a / b for a, b in zip(ours, walls[name]))
        rows.append((name, f"{statistics.median(walls[name]):.2f}", f"{statistics.median(computed[name]):.0f}",
                     "" if name == "n = 4" else f"{ratio:.2f} x",
                     f"<= {TARGET}" if name == "4 requests, one after another" else ""))
    print(f"several choices: a {PROMPT_TOKENS}-token prompt, {CHOICES} answers of {args.tokens} tokens, "
          f"median of {args.repeat}", flush=True)
    print_table(("contender", "s", "prompt tokens computed", "n = 4 vs it (paired)", "target"), rows)
    sequential = statistics.median(a / b for a, b in zip(ours, walls["4 requests, one after another"]))
    return sequential <= TARGET

