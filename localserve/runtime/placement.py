"""Where a new job's prompt starts from: which free slot it takes, and which sequence's prefix
it is handed instead of computing it (shared prefixes, issue 35).

Agents send the same long head (system prompt, tool definitions) on every request and run
several conversations at once. A sequence of the unified KV cache can own another's prefix for
the price of a metadata change (engine/prefix_copy.py), so a job never needs a particular slot to
reuse what is computed: it takes the free slot whose loss costs least, and the longest prefix any
sequence holds (idle or busy) is copied into it. The choice, then, weighs what the job gains
against what the slot it takes loses: a conversation kept nowhere else is not destroyed to serve
a prompt that merely shares its template header.

And a job whose prompt shares a long head with a prompt still being prefilled waits for that
head rather than computing it a second time beside it (waits_for); the choices of one request
(OpenAI's `n`) wait for a sibling's head however short, so their prompt is computed once.

Only sequences of the job's own scope (GenerationRequest.scope: its API key's) count: a prefix
copied from another scope's prompt, or a wait for it, would tell that prompt's text.

Plain decisions over token lists: no llama.cpp here (tests/unit/runtime/test_placement.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from .jobs import Slot
from .promptcache import common_prefix

# A job waits for another's prefill only for a shared head at least this long: below it,
# computing the head beside the other costs less than a step of waiting.
MIN_WAIT_TOKENS = 64


@dataclass(frozen=True)
class Held:
    """A sequence a prompt may take its prefix from: what its KV cache holds now, and (for a
    job still prefilling) the prompt it is on its way to holding."""
    seq_id: int
    tokens: Sequence[int]
    coming: Sequence[int] = ()
    scope: str = ""             # whose prompt it holds
    group: str | None = None    # the choice group of the job prefilling it (GenerationRequest.choice_group)


@dataclass(frozen=True)
class Placement:
    slot: Slot                  # the free slot the job takes
    source: int | None = None   # the sequence whose prefix is copied into it (None: nothing copied)
    copied: int = 0             # how many of the prompt's tokens that copy brings
    waited: bool = False        # the job waited for another job to prefill the head it shares


def place(free: list[Slot], held: list[Held], prompt: Sequence[int], key: str | None,
          can_copy: Callable[[int, int], bool], pick_without_copy: Callable[[], Slot], scope: str = "") -> Placement:
    """The slot the prompt (of `scope`) takes and the prefix copied into it.

    `held` is every sequence with tokens in it, free slots included; `can_copy(seq_id, n)` says
    whether that sequence's first n positions can be handed on; `pick_without_copy` is the choice
    made when nothing can be copied (scheduler.choose_slot)."""
    usable = len(prompt) - 1        # the last prompt token is always decoded: its logits are needed
    offers = sorted(((whole_run(prompt, min(common_prefix(h.tokens, prompt), usable)), h.seq_id)
                     for h in held if h.scope == scope), reverse=True)
    shared = [(n, seq_id) for n, seq_id in offers if n > 0]
    offers = [(n, seq_id) for n, seq_id in shared if can_copy(seq_id, n)]
    if shared and not offers:       # what it shares cannot be handed on: a slot's own prefix is all it can use
        return Placement(pick_without_copy())
    own = {s.seq_id: s.shared_with(prompt, scope) for s in free}
    keyed = [s for s in free if key is not None and s.cache_key == key and own[s.seq_id] > 0]
    if keyed:
        slot = max(keyed, key=lambda s: own[s.seq_id])
    else:
        slot = max(free, key=lambda s: _worth(s, own[s.seq_id], _best_offer(offers, s.seq_id)[0], held))
    n, source = _best_offer(offers, slot.seq_id)
    if n <= min(own[slot.seq_id], usable):
        return Placement(slot)
    return Placement(slot, source, n)


def waits_for(prompt: Sequence[int], held: list[Held], scope: str = "",
              group: str | None = None) -> tuple[int, int] | None:
    """(seq_id, length) of the head of this prompt a prefilling sequence is on its way to holding,
    at least MIN_WAIT_TOKENS longer than any other sequence holds (any longer, for a sibling
    choice of the same `group`); None when computing it here is as good. Once waiting, a job waits until that head is whole: the part the other job has
    computed counts for nothing. The holder's prefill stops at the head's end for a step
    (Scheduler.stops), so a sliding window still covers it when the copy is made."""
    usable = len(prompt) - 1
    best, best_n = None, 0
    held = [h for h in held if h.scope == scope]     # (the prompt's scope: see the module's comment)
    for h in held:
        if not h.coming:
            continue
        n = whole_run(prompt, min(common_prefix(h.coming, prompt), usable))
        elsewhere = max((common_prefix(o.tokens, prompt) for o in held if o.seq_id != h.seq_id), default=0)
        least = 1 if group is not None and h.group == group else MIN_WAIT_TOKENS
        if n - elsewhere >= least and len(h.tokens) < n and n > best_n:
            best, best_n = h.seq_id, n
    return (best, best_n) if best is not None else None


def whole_run(prompt: Sequence[int], n: int) -> int:
    """n, moved back to the start of a run of one repeated token it would end inside: an image's
    positions are such a run (one placeholder id per image), and an image is computed whole."""
    while 0 < n < len(prompt) and prompt[n - 1] == prompt[n]:
        n -= 1
    return n


def _best_offer(offers: list[tuple[int, int]], taker: int) -> tuple[int, int | None]:
    """The longest prefix a sequence other than the taker's own can hand it: (length, seq_id)."""
    return next(((n, seq_id) for n, seq_id in offers if seq_id != taker), (0, None))


def _worth(slot: Slot, own: int, offered: int, held: list[Held]) -> tuple[int, bool, bool, float]:
    """How good taking this free slot is, as a sort key: prompt tokens it brings less the slot's
    own tokens lost (those no other sequence holds too); then, alike, one whose own prefix needs
    no copy; then an empty one; then the least recently used."""
    gain = max(own, offered)
    kept_elsewhere = max((common_prefix(h.tokens, slot.tokens) for h in held
                          if h.seq_id != slot.seq_id and h.scope == slot.scope), default=0)
    lost = max(0, len(slot.tokens) - max(own, kept_elsewhere))
    return gain - lost, own >= offered, not slot.tokens, -slot.last_used
