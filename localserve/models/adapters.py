"""A loaded model's LoRA adapters as connection threads see them: ids, names, global scales, and
the adapter set each request runs under.

llama-server's shapes and rules: GET /lora-adapters lists `[{id, path, scale, ...}]`; POST
/lora-adapters takes `[{id, scale}]` and sets the global scales (an adapter not listed gets 0);
a request's `lora: [{id, scale}]` is the whole set it runs under (an adapter not listed: 0); a
request that lists none runs under the global scales. A model named `base+adapter` picks that
adapter alone at scale 1 (adapter_files.py). Every scale lies within ±LORA_SCALE_LIMIT
(dialects/fields.py reads them, dialects/limits.py). An adapter llama.cpp refused at load (engine/lora.py) is
listed with its reason; a request that asks for it is refused (BadAdapter: a 400 naming it),
and its global scale stays 0.

The set a job runs under also keys its prompt caches (generation.cache_scope): the KV cache of
a prefix computed under one set is not that prefix's under another, and is never reused there;
a slot file records its set by the adapters' names (names_of, by_names).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Sequence

from ..generation import AdapterSet
from .errors import BadAdapter


@dataclass
class Adapter:
    id: int
    name: str
    path: str
    scale: float                # global: what a request that lists no adapters runs it at
    error: str | None = None    # why llama.cpp could not load it (then it never runs)

    def as_json(self) -> dict:
        shown: dict[str, Any] = {"id": self.id, "path": self.path, "scale": self.scale, "task_name": "",
                                 "prompt_prefix": "", "name": self.name}
        if self.error is not None:
            shown["error"] = self.error
        return shown


class AdapterTable:
    """One loaded model's adapters, by id. Connection threads read and set the global scales."""

    def __init__(self, model_name: str, adapters: Sequence[Adapter]):
        self.model_name = model_name
        self.adapters = list(adapters)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.adapters)

    def as_json(self) -> list[dict]:
        with self._lock:
            return [adapter.as_json() for adapter in self.adapters]

    def set_scales(self, pairs: tuple[tuple[int, float], ...]) -> None:
        """POST /lora-adapters: these scales, 0 for every adapter not listed."""
        self._check(pairs, "lora")
        scales = dict(pairs)
        with self._lock:
            for adapter in self.adapters:
                adapter.scale = scales.get(adapter.id, 0.0)

    def resolve(self, requested: tuple[tuple[int, float], ...] | None, named: str | None = None) -> AdapterSet:
        """The set a request runs under: the adapters it lists, else the one its model name picks,
        else the global scales."""
        if requested is not None:
            self._check(requested, "lora")
            return tuple((i, scale) for i, scale in requested if scale != 0.0)
        if named is not None:
            adapter = next(a for a in self.adapters if a.name == named)
            self._usable(adapter, "model")
            return ((adapter.id, 1.0),)
        with self._lock:
            return tuple((a.id, a.scale) for a in self.adapters if a.scale != 0.0 and a.error is None)

    def names_of(self, adapters: AdapterSet) -> list[list]:
        """A set as a slot file records it: [name, scale] pairs (ids are the order of --lora, which
        another start may change; names are unique per model)."""
        return [[self.adapters[i].name, scale] for i, scale in adapters]

    def by_names(self, recorded: object) -> AdapterSet:
        """A set a slot file recorded (names_of) as this model's ids; BadAdapter naming an adapter
        the model lacks or cannot run (its cache must not be used under another set)."""
        if not isinstance(recorded, list) or not all(
                isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], (int, float))
                for p in recorded):
            raise BadAdapter("the adapters it records are not [name, scale] pairs")
        found = []
        for name, scale in recorded:
            adapter = next((a for a in self.adapters if a.name == name), None)
            if adapter is None:
                raise BadAdapter(f"model '{self.model_name}' has no LoRA adapter '{name}' ({self._listing()})")
            self._usable(adapter, "lora")
            found.append((adapter.id, float(scale)))
        return tuple(found)

    def _check(self, pairs: tuple[tuple[int, float], ...], param: str) -> None:
        for adapter_id, scale in pairs:
            if adapter_id >= len(self.adapters):
                raise BadAdapter(f"invalid '{param}': model '{self.model_name}' has no LoRA adapter {adapter_id} "
                               f"({self._listing()})", param=param)
            if scale != 0.0:
                self._usable(self.adapters[adapter_id], param)

    def _usable(self, adapter: Adapter, param: str) -> None:
        if adapter.error is not None:
            raise BadAdapter(f"LoRA adapter '{adapter.name}' (id {adapter.id}) cannot run on model "
                           f"'{self.model_name}': {adapter.error}", param=param)

    def _listing(self) -> str:
        if not self.adapters:
            return "it has none"
        return "it has " + ", ".join(f"{a.id} ({a.name})" for a in self.adapters)

