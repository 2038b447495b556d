"""What a slot's KV-cache sequence keeps when a new job takes the slot: the shared prefix stays,
the rest is cut; a sequence worth keeping is saved to the RAM prompt cache first, and a longer
prefix held by another sequence is copied in (prefix_share.py), or a saved sequence that shares
more with the new prompt is restored instead."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.engine import Engine
from ..generation import ImageChunk, outside_images, position_of
from .jobs import Job, Slot
from .prefix_share import Placement
from .promptcache import MIN_TOKENS_WORTH_SAVING, PromptCache, common_prefix


@dataclass(frozen=True)
class PrefixOrigin:
    """Where a job's cached prompt tokens came from (/slots, /metrics)."""
    tokens: int                     # prompt tokens the job did not compute
    source: str                     # "own" (its slot's sequence), "slot" (copied), "ram" (restored)
    from_slot: int | None = None    # the sequence copied from

    def as_json(self) -> dict:
        return {"tokens": self.tokens, "source": self.source, "slot": self.from_slot}


class SlotKeeper:
    def __init__(self, engine: Engine, cache: PromptCache):
        self.engine = engine
        self.cache = cache
        self.origins: dict[int, PrefixOrigin] = {}     # seq_id: where its last job's prefix came from

    def prepare(self, placement: Placement, prompt: list[int], images: list[ImageChunk] = ()) -> PrefixOrigin:
        """Make the slot's sequence a prefix of the prompt; how many tokens of it are kept (never
        part of an image: its chunk is evaluated whole), and whence."""
        slot = placement.slot
        origin = self._reuse(slot, prompt, images, placement)
        if origin.source != "slot":
            keep = max(0, min(origin.tokens, len(prompt) - 1))     # the last prompt token is always decoded
            keep = outside_images(images, keep)
            kept = keep if self._truncate(slot, keep, position_of(images, keep)) else 0
            origin = PrefixOrigin(kept, origin.source if kept else "own")
        self.origins[slot.seq_id] = origin
        return origin

    def prefix_json(self, seq_id: int) -> dict | None:
        """Where the prompt of the slot's last job began (/slots): its own sequence, a copy, RAM."""
        origin = self.origins.get(seq_id)
        return origin.as_json() if origin is not None else None

    def clear(self, slot: Slot) -> None:
        self.engine.seq_remove(slot.seq_id)
        slot.tokens = []
        slot.kv_length = 0

    def keep_computed(self, job: Job) -> None:
        """A job ended mid-prompt: what it computed stays for the next one that shares it (up to
        its last whole image: one decoded in part is cut)."""
        slot = job.slot
        n = outside_images(job.request.images, job.n_past)
        at = job.position(n)
        if n and self.engine.can_extend(slot.seq_id, at) and self.engine.seq_remove(slot.seq_id, at, -1):
            slot.tokens = job.prompt[:n]
            slot.kv_length = at
        else:
            self.clear(slot)

    def _reuse(self, slot: Slot, prompt: list[int], images: list[ImageChunk], placement: Placement) -> PrefixOrigin:
        """Save what the slot would lose; then the longest of its own shared prefix, the copy the
        placement offers, and a saved sequence, put in place."""
        shared = common_prefix(slot.tokens, prompt)
        lost = len(slot.tokens) - shared
        if lost >= MIN_TOKENS_WORTH_SAVING and self.cache.worth_saving(slot.tokens):
            self.cache.add(slot.tokens, self.engine.save_sequence(slot.seq_id))
        key, cached = self.cache.best_match(prompt)
        if placement.source is not None and placement.copied > shared and placement.copied >= cached:
            return self._copy(slot, prompt, images, placement.source, placement.copied)
        if key is None or cached <= shared:
            return PrefixOrigin(shared, "own")
        entry = self.cache.take(key)
        if not self.engine.restore_sequence(slot.seq_id, entry.state):
            slot.tokens = []
            return PrefixOrigin(0, "own")
        slot.tokens = entry.tokens
        return PrefixOrigin(cached, "ram")

    def _copy(self, slot: Slot, prompt: list[int], images: list[ImageChunk], source: int, n: int) -> PrefixOrigin:
        """Source's first n prompt tokens into the slot's sequence: never ending inside an image,
        cut at its KV position (fewer than the tokens past an M-RoPE image)."""
        n = outside_images(images, min(n, len(prompt) - 1))
        at = position_of(images, n)
        if n <= 0 or not self.engine.seq_copy(source, slot.seq_id, at):
            self.clear(slot)
            return PrefixOrigin(0, "own")
        slot.tokens = list(prompt[:n])
        slot.kv_length = at
        return PrefixOrigin(n, "slot", source)

    def _truncate(self, slot: Slot, keep: int, position: int) -> bool:
        """Drop the sequence's cache past `keep` tokens (at KV `position`: fewer past an M-RoPE
        image); False when the cache cannot be cut there."""
        if keep <= 0:
            self.clear(slot)
            return True
        ok = self.engine.can_extend(slot.seq_id, position) and self.engine.seq_remove(slot.seq_id, position, -1)
        if not ok:
            self.clear(slot)
            return False
        del slot.tokens[keep:]
        return True
