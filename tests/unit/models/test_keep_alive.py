"""Whose keep-alive a model gets (models/keep_alive.py) and the engines buried while still in use
(models/graveyard.py), without loading any model."""

from __future__ import annotations

import pytest

from localserve.models.catalogue import ModelEntry
from localserve.models.errors import BadModelRequest
from localserve.models.graveyard import Graveyard
from localserve.models.keep_alive import KeepAlive
from localserve.models.units import KEEP_ALIVE_NEVER
from localserve.settings import DEFAULT_KEEP_ALIVE, Settings

PLAIN = ModelEntry("a", "a.gguf")
OWN = ModelEntry("own", "own.gguf", overrides=(("keep_alive", 7.0),))


def test_one_model_alone_stays_and_ignores_a_requests_keep_alive():
    keep = KeepAlive(Settings(), one_model=True)
    assert keep.of_entry(PLAIN) == KEEP_ALIVE_NEVER
    assert keep.of_request("0") is None
    assert keep.of_entry(PLAIN, added=True) == DEFAULT_KEEP_ALIVE      # one pulled later goes idle as usual
    with pytest.raises(BadModelRequest) as bad:          # ignored, yet still checked
        keep.of_request("NaN")
    assert bad.value.param == "keep_alive"


def test_several_models_take_the_default_their_own_and_the_requests():
    keep = KeepAlive(Settings(), one_model=False)
    assert keep.of_entry(PLAIN) == DEFAULT_KEEP_ALIVE
    assert keep.of_entry(OWN) == 7.0
    assert keep.of_request(None) is None
    assert keep.of_request(0) == 0.0                     # 0 is a keep-alive, not "the default"
    assert keep.of_request("-1m") == KEEP_ALIVE_NEVER


def test_the_servers_keep_alive_beats_the_default_and_unpins_one_model():
    keep = KeepAlive(Settings(keep_alive=30.0), one_model=True)
    assert keep.of_entry(PLAIN) == keep.of_entry(PLAIN, added=True) == 30.0
    assert keep.of_entry(OWN) == 7.0
    assert keep.of_request("5s") == 5.0


class Buried:
    """Stands for a closed LoadedModel: whether a sample is still inside, whether it was freed."""

    def __init__(self, in_use: bool):
        self.engine_in_use = in_use
        self.freed = False

    def free_engine(self) -> None:
        assert not self.engine_in_use
        self.freed = True


def test_an_engine_in_use_is_freed_by_the_sweep_once_no_buried_one_is_in_use():
    graveyard = Graveyard()
    idle, first, second = Buried(False), Buried(True), Buried(True)
    graveyard.free(idle)
    assert idle.freed
    graveyard.free(first)
    graveyard.free(second)
    first.engine_in_use = False
    graveyard.sweep()
    assert not first.freed and not second.freed       # all or none
    second.engine_in_use = False
    graveyard.sweep()
    assert first.freed and second.freed
    graveyard.sweep()                                 # nothing left: nothing freed twice
