"""Prompt lookup: where the last few tokens of a sequence appeared before, and what followed.

A coding agent asks for a file back with one change, for a tool call that repeats a path, for
JSON that echoes its input: much of what a model writes is already in its context. The index
maps each n-gram of a sequence (for a few sizes n) to the position right after its latest
occurrence; a draft is what followed the longest n-gram that ends the sequence now. Building
it costs a few dict writes per token; a lookup a few dict reads.
"""

from __future__ import annotations

NGRAM_SIZES = (8, 4, 3, 2)         # n-gram lengths the prompt lookup matches, the longest first


class NgramIndex:
    def __init__(self, tokens: list[int] = (), sizes: tuple[int, ...] = NGRAM_SIZES):
        self.sizes = tuple(sorted(sizes, reverse=True))        # the longest match is tried first
        self.tokens: list[int] = []
        self._after: dict[int, dict[tuple[int, ...], int]] = {n: {} for n in self.sizes}
        self.extend(tokens)

    def __len__(self) -> int:
        return len(self.tokens)

    def append(self, token: int) -> None:
        # the n-grams ending just before the new token now have a follower: the new token's position
        at = len(self.tokens)
        tokens = self.tokens
        for n, after in self._after.items():
            if at >= n:
                after[tuple(tokens[at - n:at])] = at
        tokens.append(token)

    def extend(self, tokens) -> None:
        for token in tokens:
            self.append(token)

    def follow(self, tail: list[int], limit: int) -> list[int]:
        """Up to `limit` tokens that followed the longest n-gram ending `tail` (its latest occurrence)."""
        at = self.find(tail) if limit > 0 else None
        return self.tokens[at:at + limit] if at is not None else []

    def find(self, tail: list[int]) -> int | None:
        """Where what followed the longest n-gram ending `tail` begins (its latest occurrence)."""
        for n in self.sizes:
            if len(tail) < n:
                continue
            at = self._after[n].get(tuple(tail[-n:]))
            if at is not None:
                return at
        return None
