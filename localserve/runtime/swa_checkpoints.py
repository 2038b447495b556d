"""Context checkpoints for sliding-window models (Gemma 2 and 3, gpt-oss, Cohere 2 ...).

A sliding-window layer keeps only its last window of positions (the engine builds its context
so): a slot's sequence cut further back than that no longer holds what the next tokens attend
to (Sequences.can_extend), and without a checkpoint its whole prompt is computed again. A
checkpoint is the sliding-window layers' state at one prompt length (Sequences.save_window, a few
MB: the window and a batch of cells, not the context); restored, with the full-attention layers
cut at the same length, the sequence holds that prefix again and only what follows is computed.

Taken where the next request is likely to cut (llama-server takes its own near a prompt's end
and at user messages): where a new prompt stopped sharing the slot's tokens, before its own
tokens are computed (an editor's next keystroke cuts at the same place: the text typed after
the prefix changes), and at the end of a prompt, before its answer is decoded (a chat's next
prompt renders that answer again, often not as it was generated: a dropped reasoning block).
Per slot at most SWA_CHECKPOINTS_PER_SLOT, all slots' within SWA_CHECKPOINT_RAM_MB, the
oldest dropped first. A checkpoint holds the tokens it follows, so whether it fits a prompt
is a comparison, whichever sequence held them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from .promptcache import common_prefix

SWA_CHECKPOINTS_PER_SLOT = 4       # the most kept per slot (the oldest goes first)
SWA_CHECKPOINT_RAM_MB = 512        # the most all slots' checkpoints hold together
SWA_CHECKPOINT_SPACING = 8         # none taken within this many tokens after one the slot has


@dataclass
class Checkpoint:
    tokens: list[int]               # the prompt tokens the window state follows
    state: object                   # Engine.save_window's buffer (len() is its size)
    order: int = 0                  # when it was taken: the oldest goes first

    @property
    def length(self) -> int:
        return len(self.tokens)


@dataclass
class CheckpointLimits:
    per_slot: int = SWA_CHECKPOINTS_PER_SLOT
    total_bytes: int = SWA_CHECKPOINT_RAM_MB * 1024 * 1024
    spacing: int = SWA_CHECKPOINT_SPACING


def best_checkpoint(checkpoints: list[Checkpoint], prompt: list[int], keep: int) -> Checkpoint | None:
    """The longest checkpoint whose tokens begin the prompt and end at or before `keep` (the
    tokens the slot's full-attention layers still share with it), and before the prompt's last
    token (which is always computed); None when there is none."""
    fitting = [c for c in checkpoints if 0 < c.length <= min(keep, len(prompt) - 1)
               and common_prefix(c.tokens, prompt) == c.length]
    return max(fitting, key=lambda c: c.length, default=None)


def worth_taking(checkpoints: list[Checkpoint], tokens: list[int], spacing: int) -> bool:
    """Whether a checkpoint at len(tokens) adds anything: not when one the slot has already
    follows the same tokens to within `spacing` of it (restoring that one costs at most
    `spacing` tokens more)."""
    n = len(tokens)
    return n > 0 and not any(n - spacing < c.length <= n and common_prefix(c.tokens, tokens) == c.length
                             for c in checkpoints)


def to_drop(by_slot: dict[int, list[Checkpoint]], limits: CheckpointLimits) -> list[tuple[int, Checkpoint]]:
    """The checkpoints to drop, oldest first, so that each slot has at most per_slot and all of
    them hold at most total_bytes."""
    dropped = []
    for seq_id, kept in by_slot.items():
        for checkpoint in sorted(kept, key=lambda c: c.order)[:max(0, len(kept) - limits.per_slot)]:
            dropped.append((seq_id, checkpoint))
    gone = {id(c) for _, c in dropped}
    left = sorted(((s, c) for s, kept in by_slot.items() for c in kept if id(c) not in gone),
                  key=lambda sc: sc[1].order)
    size = sum(len(c.state) for _, c in left)
    for seq_id, checkpoint in left:
        if size <= limits.total_bytes:
            break
        dropped.append((seq_id, checkpoint))
        size -= len(checkpoint.state)
    return dropped


@dataclass
class SwaCheckpoints:
    """Each slot's checkpoints; `sequences` saves and restores windows (engine.sequences.Sequences:
    save_window, restore_window, n_swa). Off for a model without a sliding window."""
    sequences: object
    limits: CheckpointLimits = field(default_factory=CheckpointLimits)
    by_slot: dict[int, list[Checkpoint]] = field(default_factory=dict)
    taken: int = 0
    restored: int = 0

    def __post_init__(self) -> None:
        self._order = itertools.count()

    @property
    def on(self) -> bool:
        return self.sequences.n_swa > 0 and self.limits.per_slot > 0 and self.limits.total_bytes > 0

    @property
    def size(self) -> int:
        return sum(len(c.state) for kept in self.by_slot.values() for c in kept)

    def take(self, seq_id: int, tokens: list[int]) -> None:
        """The slot's sequence holds exactly `tokens` (their positions are their indices):
        checkpoint its window there, unless one it has already does nearly as well."""
        kept = self.by_slot.setdefault(seq_id, [])
        if not self.on or not worth_taking(kept, tokens, self.limits.spacing):
            return
        state = self.sequences.save_window(seq_id)
        if state is None or len(state) > self.limits.total_bytes:
            return
        kept.append(Checkpoint(list(tokens), state, next(self._order)))
        self.taken += 1
        for slot, checkpoint in to_drop(self.by_slot, self.limits):
            self.by_slot[slot].remove(checkpoint)

    def restore(self, seq_id: int, prompt: list[int], keep: int) -> int:
        """The slot's sequence, which shares `keep` tokens with the prompt in its full-attention
        layers but whose window has moved past them, cut back to its best checkpoint: the
        prompt tokens it holds now (0: none fitted, or llama.cpp refused; then it is empty)."""
        checkpoint = best_checkpoint(self.by_slot.get(seq_id, []), prompt, keep) if self.on else None
        if checkpoint is None or not self.sequences.restore_window(seq_id, checkpoint.state, checkpoint.length):
            return 0
        self.restored += 1
        return checkpoint.length

    def forget(self, seq_id: int, beyond: int = 0) -> None:
        """Drop the slot's checkpoints longer than `beyond` tokens: its sequence no longer holds
        their tokens (it was cut there, emptied, or replaced)."""
        kept = self.by_slot.get(seq_id)
        if kept:
            kept[:] = [c for c in kept if c.length <= beyond]

    def as_json(self) -> dict:
        """What /slots reports of them."""
        return {"count": sum(len(kept) for kept in self.by_slot.values()), "bytes": self.size,
                "limit_bytes": self.limits.total_bytes, "taken": self.taken, "restored": self.restored}
