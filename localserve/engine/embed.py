"""Pooled embeddings and ranking scores, through a llama.cpp context of their own on the loaded model.

Why a second context: pooled output needs `embeddings` on and a pooling type, both fixed when
a context is made, and its batches would need sequence ids and KV cells that belong to the
generation context's slots. The embedding context shares the weights and holds only its own
KV cache (none for an encoder) and compute buffers; a stream's cache, sampler and logits are
never touched by an embedding batch. It is made at the first embedding request.

Every input of a batch is its own sequence, all of it in one ubatch: llama.cpp pools per
ubatch, and an encoder (BERT family: no KV cache, non-causal attention) cannot split one at
all. So no input is longer than the batch (EmbeddingSpec.max_tokens). Encoders run with
llama_encode; decoders with llama_decode, their cache cleared after each batch.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
from llama_cpp import llama_cpp as ll

from .embedding_spec import EmbeddingSpec
from .engine import DecodeError, Engine
from .model_load import native_reason

EMBEDDING_MAX_SEQS = 128           # inputs packed into one embedding batch (each is a sequence of its own)

POOLING_TYPES = {"mean": ll.LLAMA_POOLING_TYPE_MEAN, "cls": ll.LLAMA_POOLING_TYPE_CLS,
                 "last": ll.LLAMA_POOLING_TYPE_LAST, "rank": ll.LLAMA_POOLING_TYPE_RANK}
POOLING_NAMES = {number: name for name, number in POOLING_TYPES.items()}
DEFAULT_POOLING = "last"     # a generative model whose GGUF declares none: its last token sums it up


class EmbeddingUnavailable(Exception):
    """llama.cpp could not make the embedding context (the message is for the user)."""


def declared_pooling(engine: Engine) -> str | None:
    """The pooling the GGUF declares ({arch}.pooling_type), None when it declares none (or NONE)."""
    raw = engine.meta(f"{engine.info.architecture}.pooling_type")
    try:
        return POOLING_NAMES.get(int(raw)) if raw is not None else None
    except ValueError:
        return None


def spec_for(engine: Engine, pooling: str | None, batch_size: int) -> EmbeddingSpec:
    """The embedding facts of a loaded model; `pooling` is --pooling (None: the GGUF's, else last)."""
    declared = declared_pooling(engine)
    chosen = declared if declared == "rank" else (pooling or declared or DEFAULT_POOLING)
    encoder = not engine.memory
    longest = min(engine.n_ctx_seq, batch_size)
    if encoder and engine.info.n_ctx_train:     # position embeddings stop there
        longest = min(longest, engine.info.n_ctx_train)
    n_out = ll.llama_model_n_cls_out(engine.model) if chosen == "rank" else ll.llama_model_n_embd_out(engine.model)
    return EmbeddingSpec(pooling=chosen, n_out=n_out, max_tokens=longest, batch_tokens=batch_size,
                         max_seqs=min(EMBEDDING_MAX_SEQS, batch_size), encoder=encoder,
                         rerank_template=_rerank_template(engine), pair_tokens=_pair_tokens(engine))


def _rerank_template(engine: Engine) -> str | None:
    text = ll.llama_model_chat_template(engine.model, b"rerank")
    return text.decode("utf-8", "replace") if text else None


def _pair_tokens(engine: Engine) -> tuple[int | None, int | None, int | None]:
    vocab = engine.vocab
    bos, eos, sep = ll.llama_vocab_bos(vocab), ll.llama_vocab_eos(vocab), ll.llama_vocab_sep(vocab)
    end = eos if eos >= 0 else sep
    return (bos if ll.llama_vocab_get_add_bos(vocab) and bos >= 0 else None,
            end if ll.llama_vocab_get_add_eos(vocab) and end >= 0 else None,
            sep if ll.llama_vocab_get_add_sep(vocab) and sep >= 0 else None)


class Embedder:
    """The embedding context. Only the runtime thread calls run()."""

    def __init__(self, engine: Engine, spec: EmbeddingSpec):
        self.spec = spec
        self.engine = engine
        self.threads = engine.threads
        params = ll.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = spec.batch_tokens
        params.n_seq_max = spec.max_seqs
        params.n_threads = params.n_threads_batch = self.threads
        params.embeddings = True
        params.pooling_type = POOLING_TYPES[spec.pooling]
        params.kv_unified = True        # one pool of cells for the batch's sequences, cleared after it
        params.no_perf = True
        self.ctx = ll.llama_init_from_model(engine.model, params)
        if not self.ctx:
            raise EmbeddingUnavailable(f"llama.cpp could not make an embedding context of {spec.batch_tokens} "
                                       f"tokens ({native_reason()})")
        self.memory = ll.llama_get_memory(self.ctx)
        self.batch = ll.llama_batch_init(spec.batch_tokens, 0, 1)

    def run(self, inputs: Sequence[Sequence[int]]) -> list[np.ndarray]:
        """One batch: each input a sequence of its own; its pooled vector (or scores) each."""
        batch, n = self.batch, 0
        for seq_id, tokens in enumerate(inputs):
            for pos, token in enumerate(tokens):
                batch.token[n] = token
                batch.pos[n] = pos
                batch.n_seq_id[n] = 1
                batch.seq_id[n][0] = seq_id
                batch.logits[n] = True     # pooling reads every token's output
                n += 1
        batch.n_tokens = n
        if self.engine.wanted_threads != self.threads:     # the model's share of the cores (models/manager.py)
            self.threads = self.engine.wanted_threads
            ll.llama_set_n_threads(self.ctx, self.threads, self.threads)
        status = ll.llama_decode(self.ctx, batch) if self.memory else ll.llama_encode(self.ctx, batch)
        try:
            if status != 0:
                raise DecodeError(status)
            width = self.spec.n_out
            return [np.ctypeslib.as_array(ll.llama_get_embeddings_seq(self.ctx, seq_id), shape=(width,)).copy()
                    for seq_id in range(len(inputs))]
        finally:
            if self.memory:
                ll.llama_memory_clear(self.memory, True)

    def close(self) -> None:
        if self.ctx:
            ll.llama_batch_free(self.batch)
            ll.llama_free(self.ctx)
            self.ctx = None
