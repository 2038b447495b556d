"""A model's LoRA adapter files: `--lora PATH[:SCALE]`, `lora` in a [models.NAME] table, and the
adapters a --models-dir holds beside their base models.

Each adapter has a name, its file's stem: the model `base+name` is the base model with that
adapter alone (as vLLM serves each adapter under a model name of its own). A scale given with
the path is the adapter's global scale at load (1 when none is given): requests that choose no
adapters run under the global scales. An adapter found in a --models-dir starts at scale 0:
only a request that names it (`base+name`, or its id in `lora`) runs it.

In a --models-dir, a GGUF whose header says `general.type = adapter` is an adapter, never a
model of its own. It goes to the model beside it of its own architecture; when there are
several, to the one its header names as its base (`general.base_model.0.name`, as llama.cpp's
convert_lora_to_gguf.py writes it, matched to a model's general.name or file stem), else to
the one whose file stem shares the longest start with its own.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ..engine.gguf_header import HeaderError, read_header

log = logging.getLogger("localserve.models")

ADAPTER_MARK = "+"          # base+adapter: a model name that picks one adapter
LORA_SCALE_LIMIT = 4.0      # a LoRA adapter's scale, per request or global, lies within ±this


class AdapterSpecError(ValueError):
    """A `PATH[:SCALE]` that cannot be read (a usage error)."""


@dataclass(frozen=True)
class AdapterFile:
    path: str
    scale: float = 1.0      # its global scale at load

    @property
    def name(self) -> str:
        return Path(self.path).stem

    def spec(self) -> str:
        return f"{self.path}:{self.scale:g}"


def read_spec(text: str) -> AdapterFile:
    """`PATH` or `PATH:SCALE` (a path that itself holds ':' and ends in no number is all path)."""
    path, _, tail = text.rpartition(":")
    try:
        scale = float(tail) if path else None
    except ValueError:
        scale = None
    if scale is None:
        return AdapterFile(os.path.expanduser(text))
    if not math.isfinite(scale):
        raise AdapterSpecError(f"LoRA adapter {text}: the scale must be a finite number")
    if abs(scale) > LORA_SCALE_LIMIT:       # as a request's scale is held (dialects/fields.py)
        raise AdapterSpecError(f"LoRA adapter {text}: the scale {scale:g} is outside -{LORA_SCALE_LIMIT:g} to "
                               f"{LORA_SCALE_LIMIT:g}")
    return AdapterFile(os.path.expanduser(path), scale)


def adapter_files(specs) -> list[AdapterFile]:
    """The adapters of a model (its `lora` setting: PATH[:SCALE] strings), checked: names unique."""
    files = [read_spec(spec) for spec in specs or ()]
    names = [f.name for f in files]
    for name in names:
        if names.count(name) > 1:
            raise AdapterSpecError(f"two LoRA adapters of one model are named '{name}' (a file's stem names it)")
    return files


def is_adapter(path: str) -> bool:
    """Whether the GGUF at `path` says it is a LoRA adapter (a file that cannot be read is a model:
    llama.cpp says what is wrong with it)."""
    try:
        return read_header(path).meta.get("general.type") == "adapter"
    except HeaderError:
        return False


def pair_adapters(models: dict[str, str], adapters: list[str]) -> dict[str, list[str]]:
    """{model name: its adapters' paths, at scale 0} for `models` ({name: path}) and adapter files."""
    paired: dict[str, list[str]] = {}
    for path in sorted(adapters):
        name = _base_of(models, path)
        if name is None:
            log.warning("LoRA adapter %s: no model of its architecture beside it; not used", path)
        else:
            paired.setdefault(name, []).append(AdapterFile(path, 0.0).spec())
    return paired


def _base_of(models: dict[str, str], adapter_path: str) -> str | None:
    header = read_header(adapter_path)
    candidates = [name for name, path in models.items() if _architecture(path) == header.architecture]
    if len(candidates) <= 1:
        return candidates[0] if candidates else None
    base = header.meta.get("general.base_model.0.name")
    named = [name for name in candidates if base and base in (name, _meta_name(models[name]))]
    if named:
        return named[0]
    stem = Path(adapter_path).stem.lower()
    return max(candidates, key=lambda name: (_shared_start(name.lower(), stem), name))


def _architecture(path: str) -> str:
    try:
        return read_header(path).architecture
    except HeaderError:
        return ""


def _meta_name(path: str) -> str:
    try:
        return str(read_header(path).meta.get("general.name") or "")
    except HeaderError:
        return ""


def _shared_start(a: str, b: str) -> int:
    return len(os.path.commonprefix([a, b]))
