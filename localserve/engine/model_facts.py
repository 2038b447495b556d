"""What a loaded model says of itself through llama.cpp: a metadata value, its fill-in-the-middle
tokens, the ModelInfo connection threads read (facade.py). Read once, at load (engine.py)."""

from __future__ import annotations

import ctypes
from typing import Callable

from llama_cpp import llama_cpp as ll

from .facade import FimTokens, ModelInfo


def meta(model, key: str) -> str | None:
    """The model's metadata value for `key` (a GGUF key), None where it has none."""
    size = ll.llama_model_meta_val_str(model, key.encode(), None, 0)
    if size < 0:
        return None
    buf = ctypes.create_string_buffer(size + 1)
    ll.llama_model_meta_val_str(model, key.encode(), buf, size + 1)
    return buf.value.decode("utf-8", "replace")


def fim_tokens(vocab, n_vocab: int) -> FimTokens:
    def token(read) -> int | None:
        found = read(vocab)
        return found if 0 <= found < n_vocab else None
    return FimTokens(pre=token(ll.llama_vocab_fim_pre), suf=token(ll.llama_vocab_fim_suf),
                     mid=token(ll.llama_vocab_fim_mid), pad=token(ll.llama_vocab_fim_pad),
                     rep=token(ll.llama_vocab_fim_rep), sep=token(ll.llama_vocab_fim_sep))


def model_info(model, vocab, path: str, n_ctx_train: int, token_text: Callable[[int], str]) -> ModelInfo:
    desc = ctypes.create_string_buffer(256)
    ll.llama_model_desc(model, desc, 256)
    bos = ll.llama_vocab_bos(vocab)
    eos = ll.llama_vocab_eos(vocab)
    return ModelInfo(
        path=path,
        architecture=meta(model, "general.architecture") or "unknown",
        n_ctx_train=n_ctx_train,
        n_params=ll.llama_model_n_params(model),
        size=ll.llama_model_size(model),
        n_vocab=ll.llama_vocab_n_tokens(vocab),
        description=desc.value.decode("utf-8", "replace"),
        chat_template=meta(model, "tokenizer.chat_template"),
        bos_token=token_text(bos) if bos >= 0 else "",
        eos_token=token_text(eos) if eos >= 0 else "",
    )
