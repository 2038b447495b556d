"""One model's place in the manager: its state, the load under way, the requests holding it.

Each model in the catalogue has a Record: unloaded → loading → loaded → unloading → unloaded
(states.py). manager.py moves it between the states under its condition variable; this module
only holds what it moves.
"""

from __future__ import annotations

import collections
import os
import re
import threading

from .catalogue import ModelEntry
from .errors import ModelError, ModelLoadFailed
from .loaded import LoadedModel, LoadFailed
from .served import ServedModel
from .states import LOADED, UNLOADED


class Attempt:
    """One load, shared by every request that asks while it runs."""

    def __init__(self):
        self.done = threading.Event()
        self.error: ModelError | None = None        # what the requests waiting for it answer
        self.failure: LoadFailed | None = None      # why llama.cpp or the configuration refused it
        self.detail = ""                            # the same for the log: every path whole
        self.at_start = False


# the directories of absolute paths in a message: /home/alice/models/x.gguf → x.gguf
_DIRECTORIES = re.compile(r"(?<![\w.~-])/(?:[^\s/'\"]+/)+")


def load_error(name: str, path: str, reason: str) -> tuple[ModelLoadFailed, str]:
    """What a failed load answers (naming files by their names alone: an absolute path tells any
    client where the operator keeps files, and under which user) and what it logs (the path whole)."""
    error = ModelLoadFailed(f"cannot load model '{name}' from {os.path.basename(path)}: "
                            f"{_DIRECTORIES.sub('', reason)} (the server's log names the files whole)")
    return error, f"cannot load model '{name}' from {path}: {reason}"


class Record:
    """One catalogue model as the manager tracks it (read by /v1/models, /health and /metrics)."""

    def __init__(self, entry: ModelEntry, keep_alive: float):
        self.entry = entry
        self.keep_alive = keep_alive      # seconds; KEEP_ALIVE_NEVER: stay
        self.state = UNLOADED
        self.loaded: LoadedModel | None = None
        self.attempt: Attempt | None = None
        self.users = 0                    # requests inside use() (or waiting for the load)
        self.holders = 0                  # of those, the ones that have the model (their jobs in flight)
        # A request's num_ctx (Ollama's): each waiting request's ask; the context the model is
        # loaded with (None: the settings') until it unloads
        self.context_asks: collections.Counter[int] = collections.Counter()
        self.n_ctx: int | None = None
        self.last_used = 0.0
        self.expires: float | None = None    # monotonic time the keep-alive runs out; None: never
        self.last_error: str | None = None

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def runtime(self):
        return None if self.loaded is None else self.loaded.runtime

    @property
    def served(self) -> ServedModel | None:
        """The loaded model as handlers see it (served.py); None while it is not loaded."""
        return None if self.loaded is None else self.loaded.served

    def wanted_context(self) -> int | None:
        """The most context a waiting request asks for (None: none asks)."""
        return max(self.context_asks) if self.context_asks else None

    def needs_more_context(self) -> bool:
        """Loaded with less context than a waiting request asks for: it must load again."""
        wanted = self.wanted_context()
        return wanted is not None and wanted > max(self.loaded.engine.n_ctx_seq, self.n_ctx or 0)

    def ask_context(self, n_ctx: int | None) -> None:
        """A request waits for the model, asking n_ctx (None: what it has)."""
        if n_ctx is not None:
            self.context_asks[n_ctx] += 1

    def hold(self, n_ctx: int | None) -> None:
        """The waiting request that asked n_ctx has the model now."""
        self._drop_ask(n_ctx)
        self.holders += 1

    def let_go(self, n_ctx: int | None, held: bool) -> None:
        """The request is done: it held the model, or gave up waiting for it."""
        if held:
            self.holders -= 1
        else:
            self._drop_ask(n_ctx)

    def _drop_ask(self, n_ctx: int | None) -> None:
        if n_ctx is not None:
            self.context_asks[n_ctx] -= 1
            if self.context_asks[n_ctx] <= 0:
                del self.context_asks[n_ctx]

    def unloadable(self) -> bool:
        return self.state == LOADED and self.users == 0 and self.loaded.idle
