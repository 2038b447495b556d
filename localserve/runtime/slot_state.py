"""A slot's KV cache taken out and put back (llama-server's /slots/{id}?action=save|restore|erase).

The work on the cache is the runtime thread's (the only one that calls llama.cpp for the
model): a connection thread queues a SlotRequest and waits for it; the runtime runs what is
queued between two steps. Files are the connection thread's business: a save hands back the
sequence's state as bytes for it to write; a restore is given the bytes it read. A slot that
is running a job is refused (SlotBusy): its cache is changing under it. A slot holding another
scope's prompt (another API key's, runtime/kvslots.py) is empty to a request: a save writes
nothing of it, an erase leaves it; a restored slot is the restoring request's scope's. A prompt
that ran under LoRA adapters is its key's too: a save hands back the adapter set with the state,
and a restore puts the state back under the set it names, so only a job of that set reuses it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..generation import AdapterSet, cache_scope, scope_parts

if TYPE_CHECKING:   # the request types are read by connection threads, which never load llama.cpp
    from ..engine.sequences import Sequences
    from .jobs import Slot
    from .kvslots import SlotKeeper

SAVE, RESTORE, ERASE = "save", "restore", "erase"


class SlotBusy(Exception):
    """The slot is running a job."""


class SlotRefused(Exception):
    """llama.cpp would not take the saved state into this slot (another model's, or damaged)."""


@dataclass
class SlotRequest:
    action: str
    seq_id: int
    scope: str = ""                                    # the request's key's cache scope (exchange.Scope.cache)
    tokens: list[int] = field(default_factory=list)    # a restore's: what the state holds
    adapters: AdapterSet = ()                          # the LoRA set of its tokens: a save's output, a restore's input
    state: bytes = b""                                 # a restore's input; a save's output
    n_erased: int = 0
    error: Exception | None = None
    done: threading.Event = field(default_factory=threading.Event)


class SlotStates:
    """The queue of slot requests and their work on the runtime thread."""

    def __init__(self, sequences: Sequences, kv: SlotKeeper, cond: threading.Condition):
        self.sequences = sequences
        self.kv = kv
        self.cond = cond            # the scheduler's: the runtime waits on it for work
        self.pending: list[SlotRequest] = []

    def submit(self, request: SlotRequest) -> SlotRequest:
        """Queue it (any thread); wait on request.done."""
        with self.cond:
            self.pending.append(request)
            self.cond.notify_all()
        return request

    def run_pending(self, slots: list[Slot]) -> None:
        """The runtime thread, between steps: every request queued, in order."""
        with self.cond:
            requests, self.pending = self.pending, []
        for request in requests:
            try:
                self._run(request, slots[request.seq_id])
            except Exception as exc:        # the connection thread answers it
                request.error = exc
            finally:
                request.done.set()

    def fail_pending(self, error: Exception) -> None:
        """The runtime stops: nobody will run what waits."""
        with self.cond:
            requests, self.pending = self.pending, []
        for request in requests:
            request.error = error
            request.done.set()

    def _run(self, request: SlotRequest, slot: Slot) -> None:
        if slot.job is not None:
            raise SlotBusy(f"slot {slot.seq_id} is running a request")
        key, adapters = scope_parts(slot.scope)
        own = key == request.scope
        if request.action == SAVE:
            request.tokens = list(slot.tokens) if own else []
            request.state = self.sequences.save(slot.seq_id) if request.tokens else b""
            request.adapters = adapters if request.tokens else ()
        elif request.action == RESTORE:
            self.kv.clear(slot)
            scope = cache_scope(request.scope, request.adapters)
            slot.belongs_to(scope)
            if not request.tokens:          # a save of an empty slot
                return
            if not self.sequences.restore(slot.seq_id, request.state):
                raise SlotRefused("llama.cpp refused the saved state for this model's cache")
            positions = self.sequences.length(slot.seq_id)
            if not fits(request.tokens, positions):
                self.sequences.remove(slot.seq_id)
                raise SlotRefused(f"the file's {len(request.tokens)} tokens are not what its state holds "
                                  f"({positions} positions)")
            slot.restored(list(request.tokens), positions, scope)
        elif own:
            request.n_erased = len(slot.tokens)
            self.kv.clear(slot)


def fits(tokens: list[int], positions: int) -> bool:
    """Whether a file's tokens are what its state holds: one position each, or fewer where images
    are (their placeholder ids are negative; an M-RoPE image takes fewer positions than tokens).
    A file edited by hand may say otherwise: a prompt matched against tokens the cache does not
    hold would be decoded at positions llama.cpp refuses (a 500), or answered from a wrong cache."""
    if any(token < 0 for token in tokens):
        return 0 < positions <= len(tokens)
    return positions == len(tokens)
