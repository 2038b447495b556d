"""Staying inside the limits: room for one more load under --max-memory and --max-models, and
--threads shared among the models busy at once.

Choices only, over the records as they stand: the manager (manager.py) reads them under its
condition variable and acts on them: it unloads the model room_for names, waits for one to go
idle, or refuses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ..settings import Settings
from .errors import ModelBusy, ModelTooLarge
from .record import Record

MiB = 1024 * 1024


def check_fits_alone(record: Record, need: int, settings: Settings) -> None:
    """ModelTooLarge when the model alone needs more than --max-memory: no eviction makes room."""
    limit = settings.max_memory
    if limit is not None and need > limit:
        raise ModelTooLarge(f"model '{record.name}' ({record.entry.path}) needs about {need // MiB} MiB, "
                            f"more than --max-memory ({limit // MiB} MiB)")


@dataclass(frozen=True)
class Room:
    """Whether `need` more bytes and one more model fit now; if not, which model to unload first
    (the least recently used idle one; None: every loaded model is busy)."""
    fits: bool
    evict: Record | None = None
    refusal: ModelBusy | None = None      # what to answer if none goes idle in time


def room_for(record: Record, records: Iterable[Record], need: int, settings: Settings) -> Room:
    limit, most = settings.max_memory, settings.max_models
    others = [r for r in records if r is not record and r.loaded is not None]
    used = sum(r.loaded.memory_bytes for r in others)
    if (most is None or len(others) < most) and (limit is None or used + need <= limit):
        return Room(fits=True)
    idle = sorted((r for r in others if r.unloadable()), key=lambda r: r.last_used)
    if idle:
        return Room(fits=False, evict=idle[0])
    blocking = "--max-memory" if most is None or len(others) < most else "--max-models"
    return Room(fits=False, refusal=ModelBusy.shortly(
        f"cannot load model '{record.name}': the loaded models ({', '.join(r.name for r in others)}) "
        f"are all busy and {blocking} leaves no room"))


def threads_for(record: Record, records: Iterable[Record], settings: Settings) -> int:
    """The model's share of --threads: its own [models.NAME] threads, else the server's divided
    among the models with requests in flight (at least 1)."""
    if record.entry.own("threads"):
        return record.entry.settings(settings).resolved_threads()
    busy = sum(1 for r in records if r.users > 0) or 1
    return max(1, settings.resolved_threads() // busy)
