"""What a model's vocabulary says once, kept per file for the next load of the same file.

The end-of-generation tokens and the longest piece take one call into llama.cpp per token
(half a second for a 262k-token vocabulary); the warm-up decode (engine.py) checks the
native kernels against the weights once. A model unloaded when idle and loaded again
(models/manager.py) is the same file: it skips both. A file changed on disk (its size or
modification time) is a new file.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass

from llama_cpp import llama_cpp as ll


@dataclass(frozen=True)
class VocabFacts:
    eog_tokens: tuple[int, ...]
    max_piece_bytes: int


_facts: dict[tuple, VocabFacts] = {}
_warmed: set[tuple] = set()
_lock = threading.Lock()


def file_key(path: str) -> tuple:
    stat = os.stat(path)
    return os.path.realpath(path), stat.st_size, stat.st_mtime_ns


def vocab_facts(key: tuple, vocab, n_vocab: int) -> VocabFacts:
    with _lock:
        known = _facts.get(key)
    if known is not None:
        return known
    eog = tuple(token for token in range(n_vocab) if ll.llama_vocab_is_eog(vocab, token))
    facts = VocabFacts(eog, _longest_piece(vocab, n_vocab))
    with _lock:
        _facts[key] = facts
    return facts


def _longest_piece(vocab, n_vocab: int) -> int:
    buf = ctypes.create_string_buffer(256)
    longest = 1
    for token in range(n_vocab):
        n = ll.llama_token_to_piece(vocab, token, buf, 256, 0, True)
        longest = max(longest, n if n >= 0 else -n)
    return longest


def warmed(key: tuple) -> bool:
    """Whether this file with these weights' buffer types already ran its warm-up decode."""
    with _lock:
        return key in _warmed


def mark_warmed(key: tuple) -> None:
    with _lock:
        _warmed.add(key)
