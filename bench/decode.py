"""Plain decoding for `make bench`: the three configurations a user meets, each against the bare
engine doing the same, with a regression guard.

- greedy with --speculative off: every request that cannot speculate;
- sampled, temperature 0.8 and top-p 0.95 (top-k 40 and min-p 0.05, localserve's defaults, given
  explicitly), with --speculative off and in the default configuration: the usual chat setting;
  the bare side runs llama.cpp's own sampler chain with the same settings;
- greedy in the default configuration (n-gram speculation on).
Each gets single-stream decode; all but the last also 4 streams at once and a conversation's
second turn, paired with the bare engine as in the main table (measure.measure_server).
llama-server, when on PATH, gets the same single-stream requests.

The guard: a single-stream ratio under GUARD makes `make bench` exit non-zero.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from . import table
from .measure import BareRuns, measure_server
from .server import LlamaServer, RunningServer

SAMPLED = {"temperature": 0.8, "top_p": 0.95, "top_k": 40, "min_p": 0.05}
GUARD = 0.95


@dataclass(frozen=True)
class Scene:
    label: str
    server_flags: tuple[str, ...]
    sampling: dict | None
    target: str
    with_streams: bool          # 4-stream aggregate and second turn too


SCENES = (
    Scene("greedy, speculation off", ("--speculative", "off"), None, ">= 0.97", True),
    Scene("sampled, speculation off", ("--speculative", "off"), SAMPLED, ">= 0.97", True),
    Scene("sampled, default (n-gram speculation)", (), SAMPLED, ">= 0.97", True),
    Scene("greedy, default (n-gram speculation)", (), None, ">= 1.0", False),
)


@dataclass
class SceneResult:
    scene: Scene
    bare: dict
    ours: dict
    llama_server: dict | None


def run(model: str, engine, work, args) -> bool:
    """Measure every scene and print the table; False when a single-stream ratio is under GUARD."""
    common = ("--threads", str(args.threads), "--ctx-size", str(args.ctx_size), "--slots", "4", "--no-store")
    results = []
    for scene in SCENES:
        if args.scene and args.scene not in scene.label:
            continue
        scene_args = argparse.Namespace(**{**vars(args), "quick": args.quick or not scene.with_streams})
        bare = BareRuns(engine, work, scene_args, scene.sampling)
        with RunningServer(model, *common, *scene.server_flags) as server:
            ours = measure_server(server, work, scene_args, bare=bare, sampling=scene.sampling, concurrency=(1, 4))
        theirs = None
        if LlamaServer.available():
            single_only = argparse.Namespace(**{**vars(args), "quick": True})
            with LlamaServer(model, args.threads, args.ctx_size, slots=4) as server:
                theirs = measure_server(server, work, single_only, sampling=scene.sampling)
        results.append(SceneResult(scene, bare.result(), ours, theirs))
    print_table(results)
    failed = [r.scene.label for r in results if r.ours["decode_vs_bare"] < GUARD]
    if failed:
        print(f"decode regression: under {GUARD} x bare in {', '.join(failed)}")
    return not failed


def print_table(results: list[SceneResult]) -> None:
    header = ("plain decoding", "bare engine", "localserve", "llama-server", "ratio (localserve)", "target")
    rows = []
    for r in results:
        theirs = f"{r.llama_server['decode']:.1f}" if r.llama_server else ""
        ratio = f"{r.ours['decode_vs_bare']:.3f} x bare"
        if r.llama_server:
            ratio += f", {r.ours['decode'] / r.llama_server['decode']:.2f} x llama-server"
        rows.append((f"{r.scene.label}: tokens/s, 1 stream", f"{r.bare['decode']:.1f}", f"{r.ours['decode']:.1f}",
                     theirs, ratio, r.scene.target))
        if "aggregate_4" in r.ours:
            rows.append((f"{r.scene.label}: tokens/s, 4 streams", f"{r.bare['aggregate_4']:.1f}",
                         f"{r.ours['aggregate_4']:.1f}", "", f"{r.ours['aggregate_4_vs_bare']:.2f} x bare", ""))
            rows.append((f"{r.scene.label}: 2nd-turn TTFT, ms", f"{r.bare['second_turn_floor'] * 1000:.1f} (floor)",
                         f"{r.ours['second_turn'] * 1000:.1f}", "",
                         f"{r.ours['second_turn_vs_floor']:.2f} x floor", "<= 1.1"))
    table.print_table(header, rows)
