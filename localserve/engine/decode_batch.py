"""One llama_decode call and the logits it leaves: the batch, the abort hook, the logits views.

The Engine owns the model and its context; this owns what a decode step needs from them:
llama.cpp's batch buffer filled from (token, position, seq_id, wants_logits) entries, the
abort callback polled during a long prompt chunk, and numpy views of the step's logits rows.
"""

from __future__ import annotations

import ctypes
from typing import Callable, Sequence

from llama_cpp import llama_cpp as ll

__all__ = ["DECODE_ABORTED", "DECODE_OK", "DecodeBatch", "DecodeError"]

DECODE_OK = 0
DECODE_ABORTED = 2


class DecodeError(Exception):
    def __init__(self, status: int):
        super().__init__(f"llama_decode failed with status {status}")
        self.status = status


class DecodeBatch:
    """llama.cpp's batch for one context, and the logits rows of its last decode."""

    def __init__(self, ctx, *, n_batch: int, n_vocab: int, n_seq: int):
        self.ctx = ctx
        self.n_vocab = n_vocab
        self.n_seq = n_seq
        self._batch = ll.llama_batch_init(n_batch, 0, 1)
        self._output_rows: dict[int, int] = {}     # batch index -> row of the logits matrix
        self._step_logits = None
        self._logits_views: dict[tuple[int, int], object] = {}
        self._abort_check: Callable[[], bool] | None = None
        self._abort_cb = ll.ggml_abort_callback(self._on_abort)

    def decode(self, entries: Sequence[tuple[int, int, int, bool]], abort_check: Callable[[], bool] | None = None) -> None:
        """Decode the entries in one llama_decode call; DecodeError unless it succeeds."""
        batch = self._batch
        output_rows = self._output_rows
        output_rows.clear()
        for i, (token, pos, seq_id, logits) in enumerate(entries):
            batch.token[i] = token
            batch.pos[i] = pos
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq_id
            batch.logits[i] = logits
            if logits:
                output_rows[i] = len(output_rows)
        batch.n_tokens = len(entries)
        self._step_logits = None
        if abort_check is not None:
            self._abort_check = abort_check
            ll.llama_set_abort_callback(self.ctx, self._abort_cb, None)
        try:
            status = ll.llama_decode(self.ctx, batch)
        finally:
            if abort_check is not None:
                ll.llama_set_abort_callback(self.ctx, ll.ggml_abort_callback(0), None)
                self._abort_check = None
        if status != DECODE_OK:
            raise DecodeError(status)

    @property
    def n_outputs(self) -> int:
        """Entries of the last decode that wanted logits."""
        return len(self._output_rows)

    def _on_abort(self, _data) -> bool:
        check = self._abort_check
        return bool(check and check())

    def logits(self, index: int):
        """Raw logits of batch entry `index` of the last decode, as a numpy view (n_vocab floats).

        The step's whole logits matrix is fetched once: every native call lets the
        connection threads take the GIL, and the runtime thread then waits for it back.
        """
        if self._step_logits is None:
            ptr = ll.llama_get_logits(self.ctx)      # rows in batch order, one per entry wanting logits
            self._step_logits = self._logits_view(ctypes.addressof(ptr.contents), len(self._output_rows))
        return self._step_logits[self._output_rows[index]]

    def _logits_view(self, address: int, rows: int):
        """A numpy view of `rows` logits rows at `address`, made once per (address, rows).

        llama.cpp keeps its logits buffer between decodes, so the views are reused:
        making one costs ~50 us on a cache-cold runtime thread, on every token.
        """
        key = (address, rows)
        view = self._logits_views.get(key)
        if view is None:
            import numpy as np
            if len(self._logits_views) > 4 * self.n_seq:      # the buffer moved: forget old addresses
                self._logits_views.clear()
            floats = (ctypes.c_float * (rows * self.n_vocab)).from_address(address)
            view = self._logits_views[key] = np.frombuffer(floats, dtype=np.float32).reshape(rows, self.n_vocab)
        return view

    def free(self) -> None:
        ll.llama_batch_free(self._batch)
