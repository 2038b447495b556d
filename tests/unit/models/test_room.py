"""Room for one more load (models/room.py): what fits, which model goes first, and what is
refused, over records alone (stand-ins for the loaded models: their memory and whether idle)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from localserve.models.catalogue import ModelEntry
from localserve.models.errors import ModelTooLarge
from localserve.models.record import Record
from localserve.models.room import check_fits_alone, room_for
from localserve.models.states import LOADED
from localserve.settings import Settings

MiB = 1024 * 1024


@dataclass
class Held:
    memory_bytes: int
    idle: bool = True


def a_record(name: str, memory: int | None = None, *, last_used: float = 0.0, users: int = 0,
           idle: bool = True) -> Record:
    record = Record(ModelEntry(name, f"{name}.gguf"), keep_alive=300.0)
    if memory is not None:
        record.loaded, record.state = Held(memory, idle), LOADED
    record.last_used, record.users = last_used, users
    return record


def test_the_least_recently_used_idle_model_goes_first():
    new = a_record("new")
    old, recent = a_record("old", 10 * MiB, last_used=1.0), a_record("recent", 10 * MiB, last_used=2.0)
    room = room_for(new, [new, recent, old], 5 * MiB, Settings(max_models=2))
    assert not room.fits and room.evict is old
    assert room_for(new, [new, recent, old], 5 * MiB, Settings(max_models=3)).fits


def test_memory_counts_what_the_others_hold():
    new, other = a_record("new"), a_record("other", 60 * MiB)
    assert room_for(new, [new, other], 40 * MiB, Settings(max_memory=100 * MiB)).fits
    room = room_for(new, [new, other], 41 * MiB, Settings(max_memory=100 * MiB))
    assert room.evict is other


def test_busy_models_leave_no_room_and_the_refusal_names_the_limit():
    new = a_record("new")
    busy = a_record("busy", 10 * MiB, users=1)
    room = room_for(new, [new, busy], 1, Settings(max_models=1))
    assert room.evict is None and "--max-models" in room.refusal.message and "busy" in room.refusal.message
    room = room_for(new, [new, busy], 95 * MiB, Settings(max_memory=100 * MiB))
    assert "--max-memory" in room.refusal.message and room.refusal.message.endswith("retry shortly")


def test_a_model_larger_than_the_limit_alone_is_refused_at_once():
    check_fits_alone(a_record("m"), 100 * MiB, Settings(max_memory=100 * MiB))
    with pytest.raises(ModelTooLarge):
        check_fits_alone(a_record("m"), 100 * MiB + 1, Settings(max_memory=100 * MiB))
