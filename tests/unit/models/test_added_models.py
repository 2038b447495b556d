"""A model added while the server runs (a pull: ModelManager.add) is there for a connection thread
all at once: one that finds its name (or an alias it takes from another model) between the
catalogue's step and the records' finds its record, and a load that reads the records while one is
added reads them as they stood. Each reader runs on its own thread at the exact moment between
the two steps (a hook there, no sleeps), without loading any model."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import pytest

from localserve.models import manager as manager_module
from localserve.models.catalogue import Catalogue, ModelEntry
from localserve.models.errors import UnknownModel
from localserve.models.manager import ModelManager
from localserve.ops.metrics import ServerMetrics
from localserve.settings import Settings


def manager() -> ModelManager:
    entries = [ModelEntry("a", "a.gguf", aliases=("org/repo",)), ModelEntry("b", "b.gguf")]
    return ModelManager(Settings(threads=4), Catalogue(entries), ServerMetrics())


def on_another_thread(look):
    """What `look` returns (or raises) when run on a thread of its own, waited for."""
    seen = {}

    def run():
        try:
            seen["value"] = look()
        except Exception as exc:       # noqa: BLE001 - the test names what it expected
            seen["error"] = exc
    reader = threading.Thread(target=run)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "the reader waited for the add to end"
    return seen


@pytest.mark.parametrize("name", ["new", "org/repo"])
def test_a_name_found_while_its_model_is_added_has_its_record(monkeypatch, name):
    """Between the catalogue's step and the records' (a lookup there was a KeyError: a 500 for
    any client naming or listing models while a pull ended), by the new model's own name and by
    the alias it takes over from another."""
    models = manager()
    seen = {}
    real_add = models.catalogue.add

    def look():
        listed = {record.name for record in models.all_models()}
        return models.find(name), models.exact(name), listed, set(models.catalogue.names())

    def add_then_look(added, taking=()):
        changed = real_add(added, taking)
        seen.update(on_another_thread(look))
        return changed

    monkeypatch.setattr(models.catalogue, "add", add_then_look)
    record = models.add(ModelEntry("new", "new.gguf", aliases=("org/repo",)), taking=("org/repo",))
    assert "error" not in seen, seen
    found, exact, listed, catalogued = seen["value"]
    assert found is exact is record and listed >= catalogued
    assert models.find("org/repo") is record and models.roster.records["a"].entry.aliases == ()


def test_a_model_whose_name_is_taken_is_not_added_nor_listed():
    models = manager()
    assert models.add(ModelEntry("b", "other.gguf")) is None
    assert models.add(ModelEntry("c", "c.gguf", aliases=("org/repo",))) is None      # not given up
    assert [r.name for r in models.all_models()] == ["a", "b"] and models.find("org/repo").name == "a"
    with pytest.raises(UnknownModel):
        models.find("c")


def test_a_load_reads_the_records_as_they_stood_while_one_is_added(monkeypatch):
    """The load's share of --threads is counted over the records: a pull adding one meanwhile
    ended the iteration ("dictionary changed size"), and the load failed."""
    models = manager()

    def threads_for(record, records, settings):
        walk = iter(records)
        next(walk)
        on_another_thread(lambda: models.add(ModelEntry("new", "new.gguf")))
        return 1 + sum(1 for _ in walk)

    monkeypatch.setattr(manager_module, "threads_for", threads_for)
    monkeypatch.setattr(manager_module, "estimate_bytes", lambda *args: 0)
    monkeypatch.setattr(manager_module, "load", lambda entry, settings, metrics, *, threads, watch, progress:
                        SimpleNamespace(name=entry.name, threads=threads, load_seconds=0.0, memory_bytes=0))
    loaded = models.load_at_start("a")
    assert loaded.threads == 2 and models.find("new").name == "new"
