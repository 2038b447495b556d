"""Images: an image's encode and prefill through the API against the bare engine doing the same
libmtmd calls (bare_vision.py), and a second turn carrying the same image against the first.

The projector is --mmproj's when given (a real one, with its own model); else a synthetic one
is generated as wide as the model's embedding (tests/support/tinyvision.py: a LLaVA-style mlp
projector, random weights, a ViT of four blocks 256 wide over 336x336 in 14-pixel patches:
576 positions an image, LLaVA 1.5's count), so the figure is the server's overhead around
libmtmd's work, not a real vision tower's cost.

- first turn: a prompt with a picture never seen before (each round its own), max_tokens 1,
  against BareVision.prefill of the prompt /apply-template shows (the server's media marker
  given as libmtmd's default). Target: <= 1.05 x the bare engine.
- second turn: the same conversation, the answer and one more user turn: the image's KV is
  the slot's already. Target: <= 0.2 x the first turn.
Rounds alternate which side runs first; each ratio is the median of ratios within a round.

Run alone with ``python -m bench.vision [--model PATH] [--mmproj PATH]``; ``make bench`` runs
it after the embeddings table.
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from localserve.engine import cpu_weights
from localserve.engine.gguf_meta import read_shape

from . import table
from .bare_vision import BareVision
from .server import RunningServer
from .versus_bare import seconds_row, standalone

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "support"))
import tinyvision  # noqa: E402  (the synthetic projector's writer and the images)

FIRST_TARGET = 1.05
SECOND_TARGET = 0.2
MAX_ROUNDS = 3
CTX = 4096
SERVER_MARKER = re.compile(r"<__media_[0-9a-f]+__>")


def synthetic_projector(model: str, directory: str) -> str:
    n_embd = read_shape(model).n_embd
    return str(tinyvision.write_tiny_mmproj(Path(directory) / "mmproj-bench.gguf", n_embd_text=n_embd, n_embd=256,
                                            n_head=4, n_ff=1024, n_layer=4, image_size=336, patch_size=14))


def picture(seed: int) -> bytes:
    shade = (seed * 37 % 256, seed * 91 % 256, seed * 53 % 256)
    return tinyvision.png_bytes(tinyvision.checkerboard(64, 64, a=shade, cell=4 + seed % 5))


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def post(port: int, path: str, body: dict) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
    finally:
        conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{path} answered {resp.status}: {data[:300]!r}")
    return json.loads(data)


def first_turn(image: bytes) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "What does this screenshot show?"},
                                         {"type": "image_url", "image_url": {"url": data_url(image)}}]}]


def timed_chat(port: int, messages: list[dict]) -> tuple[float, str]:
    started = time.perf_counter()
    reply = post(port, "/v1/chat/completions", {"messages": messages, "max_tokens": 1, "temperature": 0})
    return time.perf_counter() - started, reply["choices"][0]["message"]["content"]


def bare_seconds(port: int, bare: BareVision, messages: list[dict], image: bytes) -> float:
    prompt = SERVER_MARKER.sub(bare.marker.decode(), post(port, "/apply-template", {"messages": messages})["prompt"])
    return bare.prefill(prompt, [image])[1]


def measure(model: str, mmproj: str, threads: int, repeat: int) -> dict:
    bare = BareVision(model, mmproj, n_ctx=CTX, threads=threads, weights=cpu_weights.plan(model, "auto"))
    firsts, bares, seconds, first_ratios, second_ratios = [], [], [], [], []
    with RunningServer(model, "--threads", str(threads), "--ctx-size", str(CTX), "--slots", "1",
                       "--mmproj", mmproj) as server:
        timed_chat(server.port, first_turn(picture(999)))           # warm-up: the first encode's buffers
        bare.prefill("warm-up " + bare.marker.decode() + " done", [picture(998)])
        for r in range(repeat):
            image = picture(r)
            messages = first_turn(image)
            if r % 2 == 0:
                bares.append(bare_seconds(server.port, bare, messages, image))
            ours, answer = timed_chat(server.port, messages)
            if r % 2 == 1:
                bares.append(bare_seconds(server.port, bare, messages, image))
            again, _ = timed_chat(server.port, messages + [{"role": "assistant", "content": answer},
                                                           {"role": "user", "content": "And the colours?"}])
            firsts.append(ours)
            seconds.append(again)
            first_ratios.append(ours / bares[-1])
            second_ratios.append(again / ours)
    bare.close()
    return {"bare": statistics.median(bares), "first": statistics.median(firsts),
            "second": statistics.median(seconds), "first_ratio": statistics.median(first_ratios),
            "second_ratio": statistics.median(second_ratios)}


def print_table(result: dict, label: str) -> None:
    header = (f"images ({label})", "bare s", "localserve s", "ratio", "target")
    rows = [seconds_row("encode + prefill, first turn", result["bare"], result["first"], result["first_ratio"],
                        f"<= {FIRST_TARGET}"),
            seconds_row("second turn, same image", f"{result['first']:.3f} (first)", result["second"],
                        result["second_ratio"], f"<= {SECOND_TARGET}", against="first")]
    table.print_table(header, rows)


def run(model: str, args, mmproj: str | None = None) -> None:
    with tempfile.TemporaryDirectory() as directory:
        label = "--mmproj" if mmproj else "synthetic 576-position projector"
        mmproj = mmproj or synthetic_projector(model, directory)
        print_table(measure(model, mmproj, args.threads, min(args.repeat, MAX_ROUNDS)), label)


def main() -> int:
    def options(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--mmproj", help="its vision projector (default: a synthetic one)")

    def bench(model: str, args: argparse.Namespace, directory: str) -> None:
        mmproj = args.mmproj or synthetic_projector(model, directory)
        print_table(measure(model, mmproj, args.threads, args.repeat),
                    "--mmproj" if args.mmproj else "synthetic 576-position projector")
    return standalone("bench.vision", bench, options)


if __name__ == "__main__":
    sys.exit(main())
