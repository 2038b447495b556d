"""A small model that drafts tokens for the served one (--draft-model, speculative decoding).

It runs on the runtime thread in a llama context of its own, with a sequence for each slot of
the served model. Before drafting for a sequence it catches up with what that sequence now
holds (the common prefix stays in its KV cache, the rest is cut, the new tokens decoded), then
chooses greedily, one decode per drafted token for all sequences together. The two models
must share a vocabulary, token for token: that is checked at load. One may have a few more
tokens at the end than the other (GGUFs of one family pad the vocabulary to a multiple of
something, differently by size: Qwen2.5 0.5B has 151936 tokens, 14B 152064); the draft then
only ever proposes the tokens both have.
"""

from __future__ import annotations

import ctypes
import logging

from llama_cpp import llama_cpp as ll

from . import cpu_weights
from .model_load import ModelLoadError, check_model_file, native_reason

log = logging.getLogger("localserve.engine")

# How many tokens more one vocabulary may have than the other (padding), as llama.cpp allows.
MAX_VOCAB_PADDING = 128


class DraftModel:
    def __init__(self, path: str, target, *, threads: int, n_gpu_layers: int = 0, cpu_weights_mode: str = "auto"):
        check_model_file(path)
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers < 0 else n_gpu_layers
        # the served model's weight layout rule: on an AMX Xeon, llama.cpp's own choice crashes
        # in multi-token decodes (cpu_weights.py), and catching up a draft is one
        overrides = cpu_weights.plan(path, cpu_weights_mode, n_gpu_layers=n_gpu_layers).apply(mparams)
        self.model = ll.llama_model_load_from_file(path.encode(), mparams)
        del overrides
        if not self.model:
            raise ModelLoadError(f"llama.cpp could not load the draft model {path}: {native_reason()}")
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self.n_shared = min(self.n_vocab, target.n_vocab)     # the tokens a draft may use
        mismatch = self._vocab_mismatch(target)
        if mismatch:
            ll.llama_model_free(self.model)
            raise ModelLoadError(f"the draft model {path} does not share the served model's vocabulary: {mismatch}")
        self.n_batch = target.n_batch
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = target.n_ctx_seq * target.n_seq
        cparams.n_batch = cparams.n_ubatch = target.n_batch
        cparams.n_seq_max = target.n_seq
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.kv_unified = False
        cparams.swa_full = False
        cparams.n_outputs_max = target.n_seq
        cparams.no_perf = True
        self.ctx = ll.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            ll.llama_model_free(self.model)
            raise ModelLoadError(f"llama.cpp could not create a context for the draft model {path} ({native_reason()})")
        self.memory = ll.llama_get_memory(self.ctx)
        self._batch = ll.llama_batch_init(self.n_batch, 0, 1)
        self.held: dict[int, list[int]] = {}        # what each sequence's KV cache holds

    def _vocab_mismatch(self, target) -> str | None:
        """Why the vocabularies differ (None when the tokens both have are the same, token for token,
        and neither has more than MAX_VOCAB_PADDING tokens past the other's)."""
        if abs(self.n_vocab - target.n_vocab) > MAX_VOCAB_PADDING:
            return f"{self.n_vocab} tokens, the served model has {target.n_vocab}"
        for name, own, theirs in (("BOS", ll.llama_vocab_bos(self.vocab), ll.llama_vocab_bos(target.vocab)),
                                  ("EOS", ll.llama_vocab_eos(self.vocab), ll.llama_vocab_eos(target.vocab))):
            if own != theirs:
                return f"its {name} token is {own}, the served model's is {theirs}"
        buf = ctypes.create_string_buffer(256)
        for token in range(self.n_shared):
            n = ll.llama_token_to_piece(self.vocab, token, buf, 256, 0, True)
            if buf.raw[:max(n, 0)] != target.piece(token):
                return f"token {token} is {buf.raw[:max(n, 0)]!r} there, {target.piece(token)!r} here"
        return None

    def draft(self, wanted: list[tuple[int, list[int], int, dict[int, float]]]) -> dict[int, list[int]]:
        """For each (seq_id, tokens, limit, logit_bias): up to limit tokens greedily chosen after tokens,
        the request's logit_bias applied (a token it bans would never be accepted)."""
        import numpy as np
        rows = self._catch_up(wanted)
        drafts: dict[int, list[int]] = {seq: [] for seq, *_ in wanted}
        limits = {seq: limit for seq, _, limit, _ in wanted}
        shared = self.n_shared
        biases = {seq: (np.fromiter(ids, dtype=np.int64, count=len(ids)),
                        np.array([-np.inf if bias[t] <= -100 else bias[t] for t in ids], dtype=np.float32))
                  for seq, _, _, bias in wanted if bias for ids in [[t for t in bias if t < shared]]}

        def choose(seq: int, row: int) -> int:
            # only the tokens both models have: a padding token of the draft's is no token of the served one
            logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(self.n_vocab,))[:shared]
            if seq in biases:
                ids, values = biases[seq]
                logits = logits.copy()
                logits[ids] += values
            return int(logits.argmax())

        while rows:
            chosen = {seq: choose(seq, row) for seq, row in rows.items()}
            entries = []
            for seq, token in chosen.items():
                drafts[seq].append(token)
                if len(drafts[seq]) < limits[seq] and not ll.llama_vocab_is_eog(self.vocab, token):
                    entries.append((token, len(self.held[seq]), seq))
            if not entries:
                break
            self._decode([(t, pos, seq, True) for t, pos, seq in entries])
            rows = {}
            for i, (token, _, seq) in enumerate(entries):
                self.held[seq].append(token)
                rows[seq] = i
        return drafts

    def _catch_up(self, wanted: list[tuple[int, list[int], int, dict[int, float]]]) -> dict[int, int]:
        """Bring each sequence to its tokens; the batch row of each one's last-token logits.

        What is new but the last token is decoded in n_batch chunks, without logits; then every
        sequence's last token in one batch, so all the rows drafting starts from are in one decode."""
        prefix: list[tuple[int, int, int, bool]] = []
        last: list[tuple[int, int, int, bool]] = []
        for seq, tokens, *_ in wanted:
            held = self.held.setdefault(seq, [])
            shared = 0
            limit = min(len(held), len(tokens) - 1)     # the last token is decoded again: its logits are needed
            while shared < limit and held[shared] == tokens[shared]:
                shared += 1
            if not ll.llama_memory_seq_rm(self.memory, seq, shared, -1):
                ll.llama_memory_seq_rm(self.memory, seq, 0, -1)
                shared = 0
            del held[shared:]
            prefix += [(tokens[pos], pos, seq, False) for pos in range(shared, len(tokens) - 1)]
            last.append((tokens[-1], len(tokens) - 1, seq, True))
            held.extend(tokens[shared:])
        for start in range(0, len(prefix), self.n_batch):
            self._decode(prefix[start:start + self.n_batch])
        self._decode(last)
        return {seq: i for i, (_, _, seq, _) in enumerate(last)}

    def _decode(self, entries: list[tuple[int, int, int, bool]]) -> None:
        batch = self._batch
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, logits
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(entries)
        status = ll.llama_decode(self.ctx, batch)
        if status != 0:
            self.held.clear()
            ll.llama_memory_clear(self.memory, True)
            raise RuntimeError(f"the draft model's llama_decode failed with status {status}")

    def close(self) -> None:
        if self.ctx:
            ll.llama_batch_free(self._batch)
            ll.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            ll.llama_model_free(self.model)
            self.model = None
