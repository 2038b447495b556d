"""What switching LoRA adapter sets between decode steps costs (issue 51): `python -m bench --lora-only`.

llama.cpp applies one adapter set to a whole context, so the runtime runs one set's jobs per step
and sets the next set on the context between steps (runtime/adapter_turns.py); the first decode
under a new set reserves llama.cpp's compute graph again. On the bench model, two generated
rank-8 adapters of every layer's attention query and value matrices (random; a fine-tune's
shape), loaded by the engine's own code (engine/lora.py). One decode step of 4 sequences (a
token each, after a 64-token prompt each), timed as the runtime runs it:
- base: no adapter set on the context;
- one set: every step under the same adapter (what an adapter costs a step);
- switching: each step under the other adapter than the step before (what a switch adds).
Medians over --repeat rounds of 32 steps each.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

import numpy as np

from localserve.engine.engine import Engine
from localserve.engine.lora import LoraAdapters
from localserve.engine.model_load import quiet_llama_logs

from . import table

RANK = 8
SEQUENCES = 4
PROMPT_TOKENS = 64
STEPS = 32
ADAPTED = ("attn_q.weight", "attn_v.weight")


def write_adapter(model: str, path: str, seed: int) -> str:
    """A random rank-8 adapter of `model`'s attention query and value matrices."""
    import gguf     # a test dependency, as make bench installs it
    reader = gguf.GGUFReader(model)
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, arch)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", float(RANK))
    for tensor in reader.tensors:
        if tensor.name.endswith(ADAPTED):
            n_in, n_out = (int(n) for n in tensor.shape[:2])
            writer.add_tensor(f"{tensor.name}.lora_a", (rng.standard_normal((RANK, n_in)) / np.sqrt(n_in)).astype(np.float32))
            writer.add_tensor(f"{tensor.name}.lora_b", (rng.standard_normal((n_out, RANK)) * 0.01).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def step_times(engine: Engine, sets: list[tuple]) -> list[float]:
    """Seconds of each decode step, the step's set taken from `sets` in turn, from a fresh prompt."""
    engine.clear()
    engine.use_adapters(sets[0])
    for seq in range(SEQUENCES):
        engine.decode([(100 + i % 50, i, seq, i == PROMPT_TOKENS - 1) for i in range(PROMPT_TOKENS)])
    times = []
    for step in range(STEPS):
        started = time.perf_counter()
        engine.use_adapters(sets[step % len(sets)])
        engine.decode([(200 + step, PROMPT_TOKENS + step, seq, True) for seq in range(SEQUENCES)])
        times.append(time.perf_counter() - started)
    return times


def run(model: str, args) -> None:
    quiet_llama_logs()
    with tempfile.TemporaryDirectory() as folder:
        paths = [write_adapter(model, os.path.join(folder, f"adapter-{i}.gguf"), seed=i) for i in range(2)]
        engine = Engine(model, n_ctx=1024, n_seq=SEQUENCES, n_batch=512, threads=args.threads)
        try:
            engine.lora = LoraAdapters(engine.model, engine.info.architecture, paths)
            errors = [a.error for a in engine.lora.adapters if a.error]
            if errors:
                raise SystemExit(f"bench: the generated adapters did not load: {errors}")
            one, other = ((0, 1.0),), ((1, 1.0),)
            scenes = {"base": [()], "one set": [one], "switching": [one, other]}
            rounds: dict[str, list[float]] = {name: [] for name in scenes}
            for _ in range(args.repeat):
                for name, sets in scenes.items():       # interleaved: a shared machine's drift hits all alike
                    rounds[name].append(statistics.median(step_times(engine, sets)) * 1000)
        finally:
            engine.close()
    base, steady, switching = (statistics.median(rounds[name]) for name in scenes)
    table.print_table(["scene", "ms per step", "against base"],
                      [["base (no adapter)", f"{base:.2f}", "1.00"],
                       ["one set, no switch", f"{steady:.2f}", f"{steady / base:.2f}"],
                       ["a switch every step", f"{switching:.2f}", f"{switching / base:.2f}"]],
                      title=f"LoRA adapters: one decode step of {SEQUENCES} sequences (ms, median of {args.repeat} "
                            f"rounds of {STEPS} steps), two rank-{RANK} adapters of every attention q and v")
    print(f"a switch costs {switching - steady:.2f} ms ({(switching - steady) / steady:.0%} of a step under one set)")
