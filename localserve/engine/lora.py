"""LoRA adapters on a model: loaded once with it, and set on its context before each decode step.

llama.cpp applies one set of adapters (each with its scale) to a whole context: every sequence
in a llama_decode batch runs under it. So the runtime runs the jobs of one adapter set per
step (runtime/adapter_turns.py) and sets that set here first; setting another set makes
llama.cpp reserve its compute graph again on the next decode, which is the cost of a switch
(bench/lora.py measures it). An adapter llama.cpp refuses (another architecture, tensors
that are not the base's or not its shapes) is kept with its reason and never set: the model
serves on, and a request that asks for it is refused (models/adapters.py).
"""

from __future__ import annotations

import ctypes
import logging
from dataclasses import dataclass
from typing import Sequence

from llama_cpp import llama_cpp as ll

from ..generation import AdapterSet
from . import model_load
from .gguf_header import HeaderError, read_header

log = logging.getLogger("localserve.engine")


@dataclass
class LoadedAdapter:
    path: str
    handle: object | None        # llama_adapter_lora *; None when it could not be loaded
    error: str | None = None     # why not, in llama.cpp's words or ours


class LoraAdapters:
    """A model's adapters, by id (their order at load). The runtime thread alone calls use()."""

    def __init__(self, model, architecture: str, paths: Sequence[str]):
        self.adapters = [load_adapter(model, architecture, path) for path in paths]
        self.current: AdapterSet = ()        # what the context runs under now
        self.switches = 0                    # sets changed on the context since the load

    def __len__(self) -> int:
        return len(self.adapters)

    def use(self, ctx, adapters: AdapterSet) -> None:
        """Run the next decodes under this set (a no-op when it is the set there already)."""
        if adapters == self.current:
            return
        handles = (ll.llama_adapter_lora_p_ctypes * max(1, len(adapters)))()
        scales = (ctypes.c_float * max(1, len(adapters)))()
        for i, (adapter_id, scale) in enumerate(adapters):
            handle = self.adapters[adapter_id].handle
            if handle is None:       # models/adapters.py refuses such a request before it is queued
                raise ValueError(f"LoRA adapter {adapter_id} is not loaded")
            handles[i], scales[i] = handle, scale
        ll.llama_set_adapters_lora(ctx, handles, len(adapters), scales)
        self.current = adapters
        self.switches += 1


def load_adapter(model, architecture: str, path: str) -> LoadedAdapter:
    """The adapter at `path` for `model` (of `architecture`), or why it cannot be."""
    try:
        meta = read_header(path).meta
    except (HeaderError, OSError) as exc:
        return LoadedAdapter(path, None, f"cannot read {path}: {exc}")
    if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
        return LoadedAdapter(path, None, f"{path} is no LoRA adapter (its header says general.type = "
                                         f"{meta.get('general.type')!r}, adapter.type = {meta.get('adapter.type')!r})")
    theirs = meta.get("general.architecture")
    if theirs != architecture:
        return LoadedAdapter(path, None, f"{path} is an adapter for the {theirs} architecture; the model is "
                                         f"{architecture}")
    model_load.recent_native_errors.clear()
    handle = ll.llama_adapter_lora_init(model, path.encode())
    if not handle:
        reason = model_load.native_reason()
        log.warning("LoRA adapter %s not loaded: %s", path, reason)
        return LoadedAdapter(path, None, f"llama.cpp refused {path}: {reason}")
    return LoadedAdapter(path, handle)
