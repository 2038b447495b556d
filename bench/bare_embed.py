"""The floor for embeddings: llama.cpp's low-level bindings embedding token sequences, nothing of
localserve. The tests compare the server's vectors and rerank scores with this; make bench
divides the server's throughput by it.

One context with embeddings on and the model's pooling (or the one given; the last token's when
the GGUF declares none, as localserve's default), every input a
sequence of its own, a batch in one llama_decode (llama_encode for a model without a KV cache:
BERT-style encoders), the pooled vector of each sequence read with llama_get_embeddings_seq.
`weights` (bench only): the server's CPU weight layout (cpu_weights.WeightPlan), as bare.py takes it,
so both run the same kernels and neither the AMX ones that may crash.
"""

from __future__ import annotations

import ctypes

import numpy as np
from llama_cpp import llama_cpp as ll

POOLING = {"mean": 1, "cls": 2, "last": 3, "rank": 4}
_SILENT = ll.llama_log_callback(lambda *_: None)    # module-wide: llama.cpp keeps the pointer for good


class BareEmbedder:
    def __init__(self, path: str, *, n_batch: int = 512, n_seq: int = 128, threads: int = 1,
                 pooling: str | None = None, weights=None):
        ll.llama_backend_init()
        ll.llama_log_set(_SILENT, ctypes.c_void_p(0))
        mparams = ll.llama_model_default_params()
        keep = weights.apply(mparams) if weights is not None else None     # referenced until loaded
        self.model = ll.llama_model_load_from_file(path.encode(), mparams)
        del keep
        params = ll.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = n_batch
        n_seq = min(n_seq, n_batch)      # llama.cpp asserts room for a row per sequence within the batch
        params.n_seq_max = n_seq
        params.n_threads = params.n_threads_batch = threads
        params.embeddings = True
        params.kv_unified = True
        if pooling is not None:
            params.pooling_type = POOLING[pooling]
        self.ctx = ll.llama_init_from_model(self.model, params)
        if pooling is None and ll.llama_pooling_type(self.ctx) == 0:
            # the GGUF declares no pooling: the last token's, as localserve defaults to
            ll.llama_free(self.ctx)
            params.pooling_type = POOLING["last"]
            self.ctx = ll.llama_init_from_model(self.model, params)
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.memory = ll.llama_get_memory(self.ctx)
        self.pooling = ll.llama_pooling_type(self.ctx)
        self.width = (ll.llama_model_n_cls_out(self.model) if self.pooling == POOLING["rank"]
                      else ll.llama_model_n_embd_out(self.model))
        self.n_batch, self.n_seq = n_batch, n_seq
        self._batch = ll.llama_batch_init(n_batch, 0, 1)

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data = text.encode()
        buf = (ll.llama_token * (len(data) + 8))()
        n = ll.llama_tokenize(self.vocab, data, len(data), buf, len(buf), add_special, parse_special)
        return list(buf[:n])

    def special(self) -> dict[str, int]:
        v = self.vocab
        return {"bos": ll.llama_vocab_bos(v), "eos": ll.llama_vocab_eos(v), "sep": ll.llama_vocab_sep(v)}

    def batch(self, sequences: list[list[int]]) -> list[np.ndarray]:
        """The raw pooled outputs (not normalised) of sequences run as one batch."""
        assert sum(len(t) for t in sequences) <= self.n_batch and len(sequences) <= self.n_seq
        b, n = self._batch, 0
        for seq, tokens in enumerate(sequences):
            for pos, token in enumerate(tokens):
                b.token[n], b.pos[n], b.n_seq_id[n], b.logits[n] = token, pos, 1, True
                b.seq_id[n][0] = seq
                n += 1
        b.n_tokens = n
        status = ll.llama_decode(self.ctx, b) if self.memory else ll.llama_encode(self.ctx, b)
        if status != 0:
            raise RuntimeError(f"llama_decode failed ({status})")
        out = [np.ctypeslib.as_array(ll.llama_get_embeddings_seq(self.ctx, s), shape=(self.width,)).copy()
               for s in range(len(sequences))]
        if self.memory:
            ll.llama_memory_clear(self.memory, True)
        return out

    def embed(self, sequences: list[list[int]]) -> list[np.ndarray]:
        """Every sequence, packed in order into batches of up to n_batch tokens and n_seq sequences."""
        out: list[np.ndarray] = []
        group: list[list[int]] = []
        used = 0
        for tokens in sequences:
            if group and (used + len(tokens) > self.n_batch or len(group) == self.n_seq):
                out += self.batch(group)
                group, used = [], 0
            group.append(tokens)
            used += len(tokens)
        if group:
            out += self.batch(group)
        return out

    def close(self) -> None:
        ll.llama_batch_free(self._batch)
        ll.llama_free(self.ctx)
        ll.llama_model_free(self.model)


def normalised(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)
