"""What loading a model file teaches once, kept for the next load of the same file.

A model unloaded when idle and loaded again (models/manager.py) is the same file: it
skips what its first load already did.
- The weight plan (cpu_weights.py): ggml reads the whole GGUF header to answer it, the
  vocabulary included (70 ms for a 262k-token vocabulary).
- The end-of-generation tokens: one call into llama.cpp per token (0.1 s for 262k tokens).
- The warm-up decode (engine.py): the native kernels already ran on these weights.
- The longest piece of the vocabulary: one call per token again (0.3 to 0.5 s for 262k
  tokens), so it is scanned only when a text first needs it (Engine.tokenize: a text
  longer in bytes than its token limit), not at load.
A file changed on disk (its size or modification time) is a new file.
"""

from __future__ import annotations

import ctypes
import os
import threading
from typing import Callable, TypeVar

from llama_cpp import llama_cpp as ll

T = TypeVar("T")

_known: dict[tuple, object] = {}       # (what, file key, ...) -> what the scan or plan found
_working: dict[tuple, threading.Lock] = {}     # held while one is found: a second asker waits for it
_warmed: set[tuple] = set()
_lock = threading.Lock()


def file_key(path: str) -> tuple:
    stat = os.stat(path)
    return os.path.realpath(path), stat.st_size, stat.st_mtime_ns


def remembered(key: tuple, work: Callable[[], T]) -> T:
    """What work() returns for this key: computed by the first load that asks, kept after."""
    with _lock:
        if key in _known:
            return _known[key]
        working = _working.setdefault(key, threading.Lock())
    with working:
        with _lock:
            if key in _known:
                return _known[key]
        value = work()
        with _lock:
            _known[key] = value
            _working.pop(key, None)
        return value


def known(key: tuple) -> object | None:
    with _lock:
        return _known.get(key)


def eog_tokens(key: tuple, vocab, n_vocab: int) -> tuple[int, ...]:
    return remembered(("eog", key), lambda: tuple(t for t in range(n_vocab) if ll.llama_vocab_is_eog(vocab, t)))


def longest_piece(key: tuple, vocab, n_vocab: int) -> int:
    """The most bytes one token renders to (special tokens as their text)."""
    return remembered(("longest piece", key), lambda: _longest_piece(vocab, n_vocab))


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
