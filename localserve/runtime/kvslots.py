"""What a slot's KV-cache sequence keeps when a new job takes the slot: the shared prefix stays,
the rest is cut; a sequence worth keeping is saved to the RAM prompt cache first, and a longer
prefix held by another sequence is copied in (placement.py), or a saved sequence that shares
more with the new prompt is restored instead. A sliding-window model's sequence cut behind its
window goes back to a context checkpoint (swa_checkpoints.py), taken here where a prompt stops
sharing the slot's tokens and where it ends. Whether this model's sequences can hand a prefix on
at all is PrefixSharing's (the scheduler asks it, placement.py).

A slot's sequence belongs to the scope of the prompt it holds (Slot.scope): a job of another
scope finds it empty, and what it held goes to the RAM cache under its own scope."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from ..engine.sequences import Sequences
from ..engine.prefix_copy import SHARING_OFF
from ..generation import ImageChunk, outside_images, position_of
from .jobs import Job, Slot
from .placement import Placement
from .promptcache import PromptCache
from .swa_checkpoints import SwaCheckpoints

log = logging.getLogger("localserve.runtime")


class SequenceCopier(Protocol):
    """What sharing needs of the KV cache's sequences (engine.sequences.Sequences is one)."""
    copy_blocker: str | None

    def can_copy(self, src: int, n: int) -> bool: ...


class PrefixSharing:
    """Whether the model's sequences can hand a prefix on, and the one log line that says when they cannot."""

    def __init__(self, sequences: SequenceCopier):
        blocker = sequences.copy_blocker
        self.on = blocker is None
        self.can_copy = sequences.can_copy if self.on else None     # the scheduler's: None when off
        if blocker is not None and blocker != SHARING_OFF:     # a model's limit, not the user's choice
            log.info("prefix sharing is off for this model (%s): each sequence computes its own prompt", blocker)


@dataclass(frozen=True)
class PrefixOrigin:
    """Where a job's cached prompt tokens came from (/slots, /metrics)."""
    tokens: int                     # prompt tokens the job did not compute
    source: str                     # "own" (its slot's sequence), "slot" (copied), "ram" (restored)
    from_slot: int | None = None    # the sequence copied from

    def as_json(self) -> dict:
        return {"tokens": self.tokens, "source": self.source, "slot": self.from_slot}


class SlotKeeper:
    def __init__(self, sequences: Sequences, cache: PromptCache):
        self.sequences = sequences
        self.cache = cache
        self.origins: dict[int, PrefixOrigin] = {}     # seq_id: where its last job's prefix came from
        self.checkpoints = SwaCheckpoints(sequences)
        self.wanted: dict[int, int] = {}    # seq_id: where the prepared job's prefill pauses for a checkpoint

    def prepare(self, placement: Placement, prompt: list[int], images: list[ImageChunk] = (),
                scope: str = "") -> PrefixOrigin:
        """Make the slot's sequence a prefix of the prompt (of `scope`); how many tokens of it are
        kept (never part of an image: its chunk is evaluated whole), and whence."""
        slot = placement.slot
        held, cut = len(slot.tokens), min(slot.shared_with(prompt, scope), len(prompt) - 1)
        origin = self._reuse(slot, prompt, images, placement, scope)
        slot.belongs_to(scope)
        if origin.source != "slot":
            keep = max(0, min(origin.tokens, len(prompt) - 1))     # the last prompt token is always decoded
            keep = outside_images(images, keep)
            kept = self._truncate(slot, keep, position_of(images, keep), prompt if not images else None)
            origin = PrefixOrigin(kept, origin.source if kept else "own")
        self.checkpoints.forget(slot.seq_id, origin.tokens)
        # The prompt stops sharing the slot's tokens at `cut`: the next one may well cut there
        # too (an editor's keystroke). Checkpointed now, or when the prefill reaches it (the
        # sequence went back further: to an earlier checkpoint, or to nothing).
        wanted = cut if self.checkpoints.on and 0 < cut < held and not images else 0
        if wanted and origin.tokens == wanted:
            self.checkpoints.take(slot.seq_id, slot.tokens)
        self.wanted[slot.seq_id] = wanted if origin.tokens < wanted else 0
        self.origins[slot.seq_id] = origin
        return origin

    def checkpoint_wanted(self, seq_id: int) -> int:
        """Where the prefill of the job just prepared in this slot pauses for a checkpoint (0: nowhere)."""
        return self.wanted.pop(seq_id, 0)

    def prefill_reached(self, job: Job) -> None:
        """The job's prompt is in its slot's sequence up to n_past: a checkpoint there when one is
        wanted, or when the prompt is all in (not an editor's: its next prompt cuts before its
        end), for a next prompt that renders this answer otherwise (a chat's)."""
        if job.request.images or not self.checkpoints.on:      # no prompt copy for a model without a window
            return
        if job.n_past == job.stops.checkpoint_at or (job.n_past == len(job.prompt) and not job.request.editor_completion):
            self.checkpoints.take(job.slot.seq_id, job.prompt[:job.n_past])

    def origin(self, seq_id: int) -> PrefixOrigin | None:
        """Where the prompt of the slot's last job began (a parked job keeps it for its resume)."""
        return self.origins.get(seq_id)

    def restore_origin(self, seq_id: int, origin: PrefixOrigin) -> None:
        """A resumed job's own origin back in its slot, for /slots."""
        self.origins[seq_id] = origin

    def prefix_json(self, seq_id: int) -> dict | None:
        """Where the prompt of the slot's last job began (/slots): its own sequence, a copy, RAM."""
        origin = self.origins.get(seq_id)
        return origin.as_json() if origin is not None else None

    def clear(self, slot: Slot) -> None:
        self.sequences.remove(slot.seq_id)
        self.checkpoints.forget(slot.seq_id)
        slot.emptied()

    def keep_computed(self, job: Job) -> None:
        """A job ended mid-prompt: what it computed stays for the next one that shares it (up to
        its last whole image: one decoded in part is cut)."""
        slot = job.slot
        n = outside_images(job.request.images, job.n_past)
        at = job.position(n)
        if n and self.sequences.can_extend(slot.seq_id, at) and self.sequences.remove(slot.seq_id, at, -1):
            slot.holds(job.prompt[:n], at)
        else:
            self.clear(slot)

    def _reuse(self, slot: Slot, prompt: list[int], images: list[ImageChunk], placement: Placement,
               scope: str) -> PrefixOrigin:
        """Save what the slot would lose; then the longest of its own shared prefix, the copy the
        placement offers (of the same scope: the scheduler's), and a saved sequence of the same
        scope, put in place."""
        shared = slot.shared_with(prompt, scope)
        if self.cache.worth_saving(slot.tokens, shared, slot.scope):
            self.cache.add(slot.tokens, self.sequences.save(slot.seq_id), slot.scope)
        key, cached = self.cache.best_match(prompt, scope)
        if placement.source is not None and placement.copied > shared and placement.copied >= cached:
            return self._copy(slot, prompt, images, placement.source, placement.copied)
        if key is None or cached <= shared:
            return PrefixOrigin(shared, "own")
        entry = self.cache.take(key)
        if not self.sequences.restore(slot.seq_id, entry.state):
            slot.holds([])
            return PrefixOrigin(0, "own")
        slot.holds(entry.tokens)
        return PrefixOrigin(cached, "ram")

    def _copy(self, slot: Slot, prompt: list[int], images: list[ImageChunk], source: int, n: int) -> PrefixOrigin:
        """Source's first n prompt tokens into the slot's sequence: never ending inside an image,
        cut at its KV position (fewer than the tokens past an M-RoPE image)."""
        n = outside_images(images, min(n, len(prompt) - 1))
        at = position_of(images, n)
        if n <= 0 or not self.sequences.copy(source, slot.seq_id, at):
            self.clear(slot)
            return PrefixOrigin(0, "own")
        slot.holds(list(prompt[:n]), at)
        return PrefixOrigin(n, "slot", source)

    def _truncate(self, slot: Slot, keep: int, position: int, prompt: list[int] | None) -> int:
        """Drop the sequence's cache past `keep` tokens (at KV `position`: fewer past an M-RoPE
        image); the tokens it holds then: `keep`, fewer when its sliding window has moved past
        them and a checkpoint before them is restored (`prompt`: None with images), else 0."""
        if keep <= 0:
            self.clear(slot)
            return 0
        if self.sequences.can_extend(slot.seq_id, position):
            if self.sequences.remove(slot.seq_id, position, -1):
                slot.cut(keep)
                return keep
        elif prompt is not None and (restored := self.checkpoints.restore(slot.seq_id, prompt, keep)):
            slot.cut(restored)
            return restored
        self.clear(slot)
        return 0
