"""A llama_token_data_array over a numpy array we own: a step's logits as candidates that a
native sampler chain (or a lone grammar sampler) filters and chooses from."""

from __future__ import annotations

import ctypes

from llama_cpp import llama_cpp as ll


class CandidateBuffer:
    """A llama_token_data_array over a numpy array we own: filled from logits, then given to a chain."""

    def __init__(self, n: int, keep: bool = False):
        import numpy as np
        self.n = n
        # keep: a copy of the loaded logits, to choose again without a token the chain chose
        self.kept = np.empty(n, dtype=np.float32) if keep else None
        self.rows = np.zeros(n, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
        self.ids = np.arange(n, dtype=np.int32)
        self.array = ll.llama_token_data_array()
        self.ref = ctypes.byref(self.array)
        self._data = ctypes.cast(self.rows.ctypes.data, ll.llama_token_data_p)

    def _reset(self) -> None:
        # samplers sort and shrink the array in place: every use starts from a fresh one
        self.array.data = self._data
        self.array.size = self.n
        self.array.selected = -1
        self.array.sorted = False

    def fill_one(self, token: int) -> None:
        self.rows[0] = (token, 0.0, 0.0)
        self._reset()

    def load(self, logits) -> None:
        if self.kept is not None:
            self.kept[:] = logits
            logits = self.kept
        rows = self.rows
        rows["id"] = self.ids
        rows["logit"] = logits
        rows["p"] = 0.0
        self._reset()

    def reload_without(self, token: int) -> None:
        """Load the kept logits again, with token forbidden (the chain sorted and changed the rows)."""
        self.kept[token] = float("-inf")
        self.load(self.kept)

    def choose(self, chain, first=None) -> tuple[int, float]:
        """Apply the chain (after the sampler `first`, if any) to the loaded logits: the selected
        token and its logit after every sampler."""
        rows = self.rows
        if first is not None:
            ll.llama_sampler_apply(first, self.ref)
        ll.llama_sampler_apply(chain, self.ref)
        selected, size = self.array.selected, self.array.size
        if 0 <= selected < size and self.array.data[selected].logit != float("-inf"):
            chosen = self.array.data[selected]
            return int(chosen.id), float(chosen.logit)
        # Nothing legal was chosen (a distribution over all -inf is NaN): the best legal
        # candidate left, if any. Samplers only sort and shrink the array, in place.
        if size <= 0 or ctypes.addressof(self.array.data.contents) != self.rows.ctypes.data:
            return 0, float("-inf")
        left = rows["logit"][:size]
        best = int(left.argmax())
        return int(rows["id"][best]), float(left[best])

    def logit(self, i: int) -> float:
        return float(self.array.data[i].logit)
