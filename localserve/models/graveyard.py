"""Engines of unloaded models that cannot be freed yet.

An unloaded model's runtime thread is joined at once, but a grammar sample the runtime abandoned
past its time limit may still be inside llama.cpp (LoadedModel.engine_in_use): freeing the
engine under it would crash the process. Such a model is buried here instead, and the
keep-alive sweeper frees the buried engines once none is in use.
"""

from __future__ import annotations

import threading

from .loaded import LoadedModel


class Graveyard:
    def __init__(self) -> None:
        self._lock = threading.Lock()     # a load frees (bury) while the sweeper sweeps
        self._buried: list[LoadedModel] = []

    def free(self, loaded: LoadedModel) -> None:
        """Free the engine of a closed model now, or bury it while it is still in use."""
        with self._lock:
            if loaded.engine_in_use:
                self._buried.append(loaded)
                return
        loaded.free_engine()

    def sweep(self) -> None:
        """Free every buried engine once none of them is in use (they may share llama.cpp's
        backend state: all or none)."""
        with self._lock:
            if any(buried.engine_in_use for buried in self._buried):
                return
            freed, self._buried = self._buried, []
        for loaded in freed:
            loaded.free_engine()
