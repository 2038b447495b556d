"""What a slot's KV-cache sequence keeps when a new job takes the slot: the shared prefix stays,
the rest is cut; a sequence worth keeping is saved to the RAM prompt cache first, and a saved
sequence that shares more with the new prompt is restored instead."""

from __future__ import annotations

from ..engine.engine import Engine
from ..generation import ImageChunk, outside_images, position_of
from .jobs import Slot
from .promptcache import MIN_TOKENS_WORTH_SAVING, PromptCache, common_prefix


class SlotKeeper:
    def __init__(self, engine: Engine, cache: PromptCache):
        self.engine = engine
        self.cache = cache

    def prepare(self, slot: Slot, prompt: list[int], images: list[ImageChunk] = ()) -> int:
        """Make the slot's sequence a prefix of the prompt; how many tokens of it are kept (never
        part of an image: its chunk is evaluated whole)."""
        shared = self._reuse_cache(slot, prompt)
        keep = max(0, min(shared, len(prompt) - 1))     # the last prompt token is always decoded
        keep = outside_images(images, keep)
        return keep if self._truncate(slot, keep, position_of(images, keep)) else 0

    def clear(self, slot: Slot) -> None:
        self.engine.seq_remove(slot.seq_id)
        slot.tokens = []
        slot.kv_length = 0

    def _reuse_cache(self, slot: Slot, prompt: list[int]) -> int:
        """Save what the slot would lose, restore a better saved sequence; the shared prefix length."""
        shared = common_prefix(slot.tokens, prompt)
        lost = len(slot.tokens) - shared
        if lost >= MIN_TOKENS_WORTH_SAVING and self.cache.worth_saving(slot.tokens):
            self.cache.add(slot.tokens, self.engine.save_sequence(slot.seq_id))
        key, cached = self.cache.best_match(prompt)
        if key is None or cached <= shared:
            return shared
        entry = self.cache.take(key)
        if not self.engine.restore_sequence(slot.seq_id, entry.state):
            slot.tokens = []
            return 0
        slot.tokens = entry.tokens
        return cached

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
