"""How --threads is shared out among models busy at once (models/room.py), without loading any:
the rule reads only which models have requests in flight and which set their own threads."""

from __future__ import annotations

from localserve.models.catalogue import Catalogue, ModelEntry
from localserve.models.manager import ModelManager
from localserve.models.room import threads_for
from localserve.ops.metrics import ServerMetrics
from localserve.settings import Settings


def manager(threads: int) -> ModelManager:
    entries = [ModelEntry("a", "a.gguf"), ModelEntry("b", "b.gguf"), ModelEntry("c", "c.gguf"),
               ModelEntry("own", "own.gguf", overrides=(("threads", 3),))]
    return ModelManager(Settings(threads=threads), Catalogue(entries), ServerMetrics())


def share(models: ModelManager, record) -> int:
    return threads_for(record, models.roster.records.values(), models.settings)


def test_busy_models_share_the_threads_and_one_alone_gets_them_all():
    models = manager(8)
    a, b, c = (models.roster.records[name] for name in "abc")
    a.users = 1
    assert share(models, a) == 8
    b.users = 2
    assert share(models, a) == share(models, b) == 4
    c.users = 1
    assert share(models, c) == 2           # 8 // 3, rounded down: never more than there are
    a.users = b.users = 0
    assert share(models, c) == 8


def test_never_fewer_than_one_and_a_models_own_threads_stand():
    models = manager(2)
    for name in ("a", "b", "c"):
        models.roster.records[name].users = 1
    assert share(models, models.roster.records["a"]) == 1
    assert share(models, models.roster.records["own"]) == 3
