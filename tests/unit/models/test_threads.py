"""How --threads is shared out among models busy at once (models/manager.py), without loading any:
the rule reads only which models have requests in flight and which set their own threads."""

from __future__ import annotations

from localserve.models.catalogue import Catalogue, ModelEntry
from localserve.models.manager import ModelManager
from localserve.ops.metrics import ServerMetrics
from localserve.settings import Settings


def manager(threads: int) -> ModelManager:
    entries = [ModelEntry("a", "a.gguf"), ModelEntry("b", "b.gguf"), ModelEntry("c", "c.gguf"),
               ModelEntry("own", "own.gguf", overrides=(("threads", 3),))]
    return ModelManager(Settings(threads=threads), Catalogue(entries), ServerMetrics())


def test_busy_models_share_the_threads_and_one_alone_gets_them_all():
    models = manager(8)
    a, b, c = (models.records[name] for name in "abc")
    a.users = 1
    assert models._threads_for(a) == 8
    b.users = 2
    assert models._threads_for(a) == models._threads_for(b) == 4
    c.users = 1
    assert models._threads_for(c) == 2            # 8 // 3, rounded down: never more than there are
    a.users = b.users = 0
    assert models._threads_for(c) == 8


def test_never_fewer_than_one_and_a_models_own_threads_stand():
    models = manager(2)
    for name in ("a", "b", "c"):
        models.records[name].users = 1
    assert models._threads_for(models.records["a"]) == 1
    assert models._threads_for(models.records["own"]) == 3
