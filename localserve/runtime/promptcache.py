"""A RAM cache of evicted sequences, so a conversation that comes back skips its prefill.

When a slot is about to be reused for a different prompt, the runtime saves the
slot's sequence here (llama_state_seq_get_data) if it is worth keeping. A new job
whose prompt shares a longer prefix with a saved sequence than with any free slot
gets that sequence restored into its slot. Entries are evicted least recently
used first, so the total stays under --cache-ram. Each entry keeps the scope of the prompt it
holds (GenerationRequest.scope): only a prompt of the same scope is restored from it.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

MIN_TOKENS_WORTH_SAVING = 32
# A sequence whose new prompt keeps most of it (an editor's keystroke cuts the last few hundred
# tokens of a few thousand; a regenerated answer) is not saved: its slot still holds what is kept,
# and a save would copy the whole sequence to RAM for a tail that seldom comes back (every
# keystroke would push a near-copy into the cache and evict conversations that do come back).
MIN_SHARE_LOST_WORTH_SAVING = 0.25


@dataclass
class CachedSequence:
    tokens: list[int]
    state: bytes
    scope: str = ""


class PromptCache:
    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self.entries: collections.OrderedDict[int, CachedSequence] = collections.OrderedDict()
        self.size = 0
        self._next_key = 0
        self.hits = 0

    def __len__(self) -> int:
        return len(self.entries)

    def worth_saving(self, tokens: list[int], kept: int = 0, scope: str = "") -> bool:
        """Whether a slot's sequence of `tokens` (of `scope`), of which a new prompt keeps the
        first `kept`, should be saved before it is cut."""
        lost = len(tokens) - kept
        if self.limit_bytes <= 0 or lost < MIN_TOKENS_WORTH_SAVING or lost < len(tokens) * MIN_SHARE_LOST_WORTH_SAVING:
            return False
        # a sequence already covered by a saved one (same or longer prefix) adds nothing
        return not any(e.scope == scope and len(e.tokens) >= len(tokens) and e.tokens[:len(tokens)] == tokens
                       for e in self.entries.values())

    def add(self, tokens: list[int], state: bytes, scope: str = "") -> None:
        if len(state) > self.limit_bytes:
            return
        for key in [k for k, e in self.entries.items() if e.scope == scope and tokens[:len(e.tokens)] == e.tokens]:
            self._drop(key)                     # the new entry extends these
        while self.size + len(state) > self.limit_bytes and self.entries:
            self._drop(next(iter(self.entries)))
        self.entries[self._next_key] = CachedSequence(list(tokens), state, scope)
        self._next_key += 1
        self.size += len(state)

    def best_match(self, prompt: list[int], scope: str = "") -> tuple[int | None, int]:
        """(key, shared prefix length) of the entry of `scope` sharing the longest prefix with prompt."""
        best_key, best_len = None, 0
        for key, entry in self.entries.items():
            if entry.scope != scope:
                continue
            n = common_prefix(entry.tokens, prompt)
            if n > best_len:
                best_key, best_len = key, n
        return best_key, best_len

    def take(self, key: int) -> CachedSequence:
        """Remove and return an entry (it moves back into a slot)."""
        entry = self.entries.pop(key)
        self.size -= len(entry.state)
        self.hits += 1
        return entry

    def _drop(self, key: int) -> None:
        self.size -= len(self.entries.pop(key).state)


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading tokens a and b share. Slot choice compares every sequence with every other
    on each admission (placement.py): slices are compared in C, halving the span where they
    first differ, not token by token in Python (10,000-token heads)."""
    if type(a) is not type(b):
        a, b = list(a), list(b)
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    same, differs = 0, n        # a[:same] == b[:same]; a[:differs] != b[:differs]
    while differs - same > 1:
        mid = (same + differs) // 2
        if a[same:mid] == b[same:mid]:
            same = mid
        else:
            differs = mid
    return same
