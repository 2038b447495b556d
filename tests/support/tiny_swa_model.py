"""A tiny random-weight Gemma 3 GGUF: sliding-window attention on every other layer.

The project's other tiny models (tinymodel.py) are llama models, which attend to the whole
context. This one is llama.cpp's ``gemma3`` architecture with a small window (``n_swa``
tokens) on layer 0 and full attention on layer 1 (``sliding_window_pattern`` 2), on the same
vocabulary as tinymodel's, so what a sliding window changes in the KV cache (the engine keeps
only the window: engine.py, runtime/swa_checkpoints.py) shows on prompts of a few hundred tokens.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tinymodel import tiny_vocab, tokenizer_metadata, write_gguf


def write_tiny_swa_gguf(path: str | os.PathLike[str], *, n_swa: int = 16, n_embd: int = 64, n_head: int = 4,
                        n_ff: int = 128, context_length: int = 4096, seed: int = 0) -> Path:
    path = Path(path)
    vocab = tiny_vocab()
    n_vocab, head_dim, n_layer = len(vocab), n_embd // n_head, 2
    arch = "gemma3"
    meta = {
        "general.name": "tiny-random-gemma3",
        "general.file_type": 0,
        f"{arch}.context_length": context_length,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.block_count": n_layer,
        f"{arch}.feed_forward_length": n_ff,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_head,
        f"{arch}.attention.key_length": head_dim,
        f"{arch}.attention.value_length": head_dim,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.attention.sliding_window": n_swa,
        f"{arch}.attention.sliding_window_pattern": 2,      # layer 0 windowed, layer 1 whole
        f"{arch}.rope.freq_base": 10000.0,
        **tokenizer_metadata(vocab),
    }
    rng = np.random.default_rng(seed)

    def rand(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    proj = 1.0 / np.sqrt(n_embd)
    # Gemma scales the embeddings by sqrt(n_embd): small ones keep the activations moderate
    tensors = [("token_embd.weight", rand(n_vocab, n_embd, std=proj)), ("output_norm.weight", ones(n_embd))]
    for i in range(n_layer):
        b = f"blk.{i}"
        tensors += [
            (f"{b}.attn_norm.weight", ones(n_embd)),
            (f"{b}.attn_q.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_k.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_v.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_output.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_q_norm.weight", ones(head_dim)),
            (f"{b}.attn_k_norm.weight", ones(head_dim)),
            (f"{b}.post_attention_norm.weight", ones(n_embd)),
            (f"{b}.ffn_norm.weight", ones(n_embd)),
            (f"{b}.ffn_gate.weight", rand(n_ff, n_embd, std=proj)),
            (f"{b}.ffn_up.weight", rand(n_ff, n_embd, std=proj)),
            (f"{b}.ffn_down.weight", rand(n_embd, n_ff, std=1.0 / np.sqrt(n_ff))),
            (f"{b}.post_ffw_norm.weight", ones(n_embd)),
        ]
    tensors.append(("output.weight", rand(n_vocab, n_embd, std=2.0)))
    return write_gguf(path, arch, meta, tensors)
