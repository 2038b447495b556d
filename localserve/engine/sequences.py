"""The KV cache's sequences of one llama.cpp context: cut, measure, copy a prefix from one to
another, save and restore one (the RAM prompt cache, parking, /slots), and a sliding window's
part of one (context checkpoints). The engine makes one for its context (Engine.sequences);
the runtime's parts are handed it and call it on the runtime thread alone."""

from __future__ import annotations

import ctypes

from llama_cpp import llama_cpp as ll

# A copy as data moves every position the holder has, not only the prefix wanted: it is made for
# at least this many tokens (not a template's header that every prompt shares) ...
MIN_DATA_COPY_TOKENS = 16
# ... and only from a holder at most this many times longer than the prefix (a position copied
# costs microseconds, one computed on a CPU a millisecond or more; on a GPU the gap is smaller).
DATA_COPY_SPAN = 64


class Sequences:
    def __init__(self, ctx, memory, *, n_swa: int, copy_blocker: str | None, shares_cells: bool):
        self.ctx = ctx                      # llama.cpp's context and its memory (the KV cache)
        self.memory = memory
        self.n_swa = n_swa                  # the model's sliding window (0: none)
        self.copy_blocker = copy_blocker    # why no prefix may be copied into another sequence (None: it may)
        self._shares_cells = shares_cells   # whether two sequences may own one cell (prefix_copy.shares_cells)

    def remove(self, seq_id: int, start: int = 0, end: int = -1) -> bool:
        """False when llama.cpp cannot cut the sequence there (then remove it whole)."""
        return bool(ll.llama_memory_seq_rm(self.memory, seq_id, start, end))

    def length(self, seq_id: int) -> int:
        """Positions the sequence holds in the KV cache (its highest position + 1; 0 when empty)."""
        return ll.llama_memory_seq_pos_max(self.memory, seq_id) + 1

    def can_extend(self, seq_id: int, keep: int) -> bool:
        """Whether a sequence cut at `keep` still holds what new tokens must attend to.

        A sliding-window cache keeps only the last window of positions: a prefix
        can be reused only if the window before `keep` is still there.
        """
        if keep <= 0 or self.n_swa <= 0:
            return True
        return ll.llama_memory_seq_pos_min(self.memory, seq_id) <= max(0, keep - self.n_swa)

    def can_copy(self, src: int, n: int) -> bool:
        """Whether src's first n positions can be handed to another sequence, and are worth it
        (prefix_copy.py)."""
        length = self.length(src)
        if self.copy_blocker is not None or length < n:
            return False
        if self._shares_cells:
            return True
        return n >= MIN_DATA_COPY_TOKENS and n * DATA_COPY_SPAN >= length and self.can_extend(src, n)

    def copy(self, src: int, dst: int, n: int) -> bool:
        """dst, emptied first, holds src's first n positions: their cells shared (a unified cache), or
        copied as data and cut at n (a stream per sequence; a sliding window). False when that
        failed (dst is empty then)."""
        if self._shares_cells:
            ll.llama_memory_seq_rm(self.memory, dst, 0, -1)
            ll.llama_memory_seq_cp(self.memory, src, dst, 0, n)
            return True
        if self._copy_state(src, dst) and self.can_extend(dst, n) and self.remove(dst, n, -1):
            return True
        self.remove(dst)
        return False

    def _copy_state(self, src: int, dst: int) -> bool:
        """dst holds all of src's positions: its KV state read into one buffer and written from
        it (no bytes object in between: a head's state is tens of megabytes)."""
        size = ll.llama_state_seq_get_size(self.ctx, src)
        buf = (ctypes.c_uint8 * size)()
        written = ll.llama_state_seq_get_data(self.ctx, buf, size, src)
        self.remove(dst)
        return bool(written) and ll.llama_state_seq_set_data(self.ctx, buf, written, dst) != 0

    def save(self, seq_id: int) -> bytes:
        """A copy of one sequence's KV state, to restore later into any sequence."""
        size = ll.llama_state_seq_get_size(self.ctx, seq_id)
        buf = (ctypes.c_uint8 * size)()
        written = ll.llama_state_seq_get_data(self.ctx, buf, size, seq_id)
        # string_at copies the bytes in one go; bytes(buf[:n]) would build a list of n ints
        return ctypes.string_at(buf, written)

    def restore(self, seq_id: int, state: bytes) -> bool:
        self.remove(seq_id)
        buf = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
        if ll.llama_state_seq_set_data(self.ctx, buf, len(state), seq_id) == 0:
            self.remove(seq_id)
            return False
        return True

    def save_window(self, seq_id: int):
        """The sliding-window layers' part of one sequence's state, as a ctypes buffer (kept as
        is: no copy to bytes and back), for restore_window; None when llama.cpp wrote none. A
        context checkpoint (runtime/swa_checkpoints.py): what the window held at this length."""
        size = ll.llama_state_seq_get_size_ext(self.ctx, seq_id, ll.LLAMA_STATE_SEQ_FLAGS_SWA_ONLY)
        if size <= 0:
            return None
        buf = (ctypes.c_uint8 * size)()
        written = ll.llama_state_seq_get_data_ext(self.ctx, buf, size, seq_id, ll.LLAMA_STATE_SEQ_FLAGS_SWA_ONLY)
        return buf if written == size else None

    def restore_window(self, seq_id: int, state, length: int) -> bool:
        """The sequence's sliding-window layers as save_window found them at `length` positions,
        and its other layers cut there: it holds those `length` positions again. False (the
        sequence emptied) when llama.cpp refused."""
        if ll.llama_state_seq_set_data_ext(self.ctx, state, len(state), seq_id,
                                           ll.LLAMA_STATE_SEQ_FLAGS_SWA_ONLY) == 0:
            self.remove(seq_id)
            return False
        if self.remove(seq_id, length, -1) and self.can_extend(seq_id, length):
            return True
        self.remove(seq_id)
        return False
