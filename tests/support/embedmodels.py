"""Tiny random-weight embedding and ranking models the real llama.cpp engine loads and runs.

* :func:`write_tiny_bert`: a ``bert``-architecture encoder (non-causal attention, no KV
  cache, run with ``llama_encode``) with a WordPiece vocabulary and the pooling it
  declares (``mean``, ``cls``), or ``rank`` with the classifier head llama.cpp's BERT
  loader looks for (``cls.weight``/``cls.bias``, ``cls.output.weight``/``cls.output.bias``).
* :func:`write_pooled_decoder`: tinymodel's ``llama`` decoder with ``llama.pooling_type``
  set, as Qwen3-Embedding-style decoder embedders declare it; it still generates.

WordPiece vocabulary (what llama.cpp's WPM tokenizer reads: a word-start piece is
stored with a leading "▁", a continuation piece without the "##")::

    0 [PAD]  1 [UNK]  2 [CLS]  3 [SEP]  4 [MASK]
    then "▁c" for every lowercase letter, digit and punctuation character c
    then "c" for every lowercase letter and digit (continuations)
    then the whole words of WORDS, as "▁word"
"""

from __future__ import annotations

import os
import string
from pathlib import Path
from typing import Any, Mapping

import numpy as np
from gguf import TokenType

from tinymodel import CHATML_TEMPLATE, write_gguf, write_tiny_gguf

PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = 0, 1, 2, 3, 4
WORDS = ("hello", "world", "the", "cat", "dog", "sat", "on", "mat", "query", "document", "embedding",
         "rank", "paris", "france", "capital", "of", "is", "what", "a", "an", "and")
POOLING = {"none": 0, "mean": 1, "cls": 2, "last": 3, "rank": 4}


def bert_vocab() -> list[str]:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    starts = string.ascii_lowercase + string.digits + string.punctuation
    vocab += ["\u2581" + c for c in starts]
    vocab += list(string.ascii_lowercase + string.digits)
    vocab += ["\u2581" + w for w in WORDS if "\u2581" + w not in vocab]
    return vocab


def write_tiny_bert(path: str | os.PathLike[str], *, pooling: str = "mean", n_embd: int = 64, n_layer: int = 2,
                    n_head: int = 4, n_ff: int = 128, context_length: int = 512, seed: int = 0,
                    extra_metadata: Mapping[str, Any] | None = None) -> Path:
    """A BERT-style encoder GGUF; pooling 'rank' adds the classifier head (one score)."""
    vocab = bert_vocab()
    n_vocab = len(vocab)
    types = [int(TokenType.CONTROL)] * 5 + [int(TokenType.NORMAL)] * (n_vocab - 5)
    meta: dict[str, Any] = {
        "general.name": "tiny-random-bert",
        "general.file_type": 0,
        "bert.context_length": context_length,
        "bert.embedding_length": n_embd,
        "bert.feed_forward_length": n_ff,
        "bert.block_count": n_layer,
        "bert.attention.head_count": n_head,
        "bert.attention.layer_norm_epsilon": 1e-12,
        "bert.attention.causal": False,
        "bert.pooling_type": POOLING[pooling],
        "tokenizer.ggml.model": "bert",
        "tokenizer.ggml.tokens": vocab,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.token_type_count": 2,
        "tokenizer.ggml.bos_token_id": CLS_ID,
        "tokenizer.ggml.cls_token_id": CLS_ID,
        "tokenizer.ggml.seperator_token_id": SEP_ID,     # llama.cpp's spelling
        "tokenizer.ggml.unknown_token_id": UNK_ID,
        "tokenizer.ggml.padding_token_id": PAD_ID,
        "tokenizer.ggml.mask_token_id": MASK_ID,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
        "tokenizer.ggml.add_sep_token": True,
    }
    if pooling == "rank":
        meta["bert.classifier.output_labels"] = ["relevant"]
    meta.update(extra_metadata or {})
    rng = np.random.default_rng(seed)

    def rand(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    proj = 1.0 / np.sqrt(n_embd)
    tensors: list[tuple[str, np.ndarray]] = [
        ("token_embd.weight", rand(n_vocab, n_embd, std=1.0)),
        ("token_types.weight", rand(2, n_embd, std=0.1)),
        ("position_embd.weight", rand(context_length, n_embd, std=0.5)),
        ("token_embd_norm.weight", ones(n_embd)),
        ("token_embd_norm.bias", zeros(n_embd)),
    ]
    for i in range(n_layer):
        b = f"blk.{i}"
        tensors += [
            (f"{b}.attn_q.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_q.bias", rand(n_embd, std=0.02)),
            (f"{b}.attn_k.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_k.bias", rand(n_embd, std=0.02)),
            (f"{b}.attn_v.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_v.bias", rand(n_embd, std=0.02)),
            (f"{b}.attn_output.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_output.bias", rand(n_embd, std=0.02)),
            (f"{b}.attn_output_norm.weight", ones(n_embd)),
            (f"{b}.attn_output_norm.bias", zeros(n_embd)),
            (f"{b}.ffn_up.weight", rand(n_ff, n_embd, std=proj)),
            (f"{b}.ffn_up.bias", rand(n_ff, std=0.02)),
            (f"{b}.ffn_down.weight", rand(n_embd, n_ff, std=1.0 / np.sqrt(n_ff))),
            (f"{b}.ffn_down.bias", rand(n_embd, std=0.02)),
            (f"{b}.layer_output_norm.weight", ones(n_embd)),
            (f"{b}.layer_output_norm.bias", zeros(n_embd)),
        ]
    if pooling == "rank":
        tensors += [
            ("cls.weight", rand(n_embd, n_embd, std=proj)),
            ("cls.bias", rand(n_embd, std=0.02)),
            ("cls.output.weight", rand(1, n_embd, std=2.0 * proj)),
            ("cls.output.bias", rand(1, std=0.1)),
        ]
    return Path(write_gguf(path, "bert", meta, tensors))


def write_pooled_decoder(path: str | os.PathLike[str], *, pooling: str = "last", **kwargs: Any) -> Path:
    """tinymodel's llama decoder (ChatML template) declaring a pooling type; it appends
    </s> to what it embeds, as Qwen3-Embedding appends its end token."""
    extra = {"llama.pooling_type": POOLING[pooling], "tokenizer.ggml.add_eos_token": True,
             **kwargs.pop("extra_metadata", {})}
    return write_tiny_gguf(path, chat_template=CHATML_TEMPLATE, extra_metadata=extra, **kwargs)


#: A Qwen3-Reranker-style pair template ({query}, {document}), as such GGUFs carry it.
RERANK_TEMPLATE = ("<|im_start|>system\nJudge whether the document answers the query.<|im_end|>\n"
                   "<|im_start|>user\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"
                   "<|im_start|>assistant\n")


def write_tiny_qwen3_reranker(path: str | os.PathLike[str], *, n_embd: int = 64, n_layer: int = 2, n_head: int = 4,
                              n_ff: int = 128, seed: int = 0) -> Path:
    """A ``qwen3`` decoder with a ranking head as Qwen3-Reranker GGUFs have it: ``cls.output`` of two
    labels (yes, no) that llama.cpp softmaxes, the last token pooled, and a ``rerank`` template."""
    from tinymodel import tiny_vocab, tokenizer_metadata
    vocab = tiny_vocab()
    n_vocab, head = len(vocab), n_embd // n_head
    arch = "qwen3"
    meta: dict[str, Any] = {
        "general.name": "tiny-random-qwen3-reranker",
        "general.file_type": 0,
        f"{arch}.context_length": 2048,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.block_count": n_layer,
        f"{arch}.feed_forward_length": n_ff,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_head,
        f"{arch}.attention.key_length": head,
        f"{arch}.attention.value_length": head,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.rope.freq_base": 10000.0,
        f"{arch}.pooling_type": POOLING["rank"],
        f"{arch}.classifier.output_labels": ["yes", "no"],
        **tokenizer_metadata(vocab),
        "tokenizer.chat_template": CHATML_TEMPLATE,
        "tokenizer.chat_template.rerank": RERANK_TEMPLATE,
    }
    rng = np.random.default_rng(seed)

    def rand(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    proj = 1.0 / np.sqrt(n_embd)
    tensors: list[tuple[str, np.ndarray]] = [
        ("token_embd.weight", rand(n_vocab, n_embd, std=1.0)),
        ("output_norm.weight", np.ones(n_embd, dtype=np.float32)),
        ("output.weight", rand(n_vocab, n_embd, std=2.0 * proj)),
        ("cls.output.weight", rand(2, n_embd, std=4.0 * proj)),
    ]
    for i in range(n_layer):
        b = f"blk.{i}"
        tensors += [
            (f"{b}.attn_norm.weight", np.ones(n_embd, dtype=np.float32)),
            (f"{b}.attn_q.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_k.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_v.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_q_norm.weight", np.ones(head, dtype=np.float32)),
            (f"{b}.attn_k_norm.weight", np.ones(head, dtype=np.float32)),
            (f"{b}.attn_output.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32)),
            (f"{b}.ffn_gate.weight", rand(n_ff, n_embd, std=proj)),
            (f"{b}.ffn_up.weight", rand(n_ff, n_embd, std=proj)),
            (f"{b}.ffn_down.weight", rand(n_embd, n_ff, std=1.0 / np.sqrt(n_ff))),
        ]
    return Path(write_gguf(path, arch, meta, tensors))
