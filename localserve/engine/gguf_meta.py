"""A model's size before it is loaded: the GGUF header's numbers, and what a load will take.

The estimate (weights + KV cache + compute buffers) lets the model manager make room
before a load, not after; the manager checks it against the process's growth once the
model is in. The header is read here in Python (the format is a flat list of typed
key/value pairs), so nothing of llama.cpp is touched for a model that is not loaded.
Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
"""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from typing import BinaryIO

from .model_load import GGUF_MAGIC, ModelLoadError

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_VOCAB = "tokenizer.ggml.tokens"
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$")
F16_BYTES = 2


@dataclass(frozen=True)
class ModelShape:
    file_bytes: int         # every part of a split model
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ctx_train: int
    n_vocab: int


@dataclass(frozen=True)
class MemoryEstimate:
    weights: int
    kv: int
    compute: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + self.compute


def read_shape(path: str) -> ModelShape:
    """The numbers of a model's header that decide its memory; ModelLoadError naming the file."""
    try:
        with open(path, "rb") as handle:
            meta = _read_meta(handle, wanted=("general.architecture",))
            arch = meta.get("general.architecture")
            if not isinstance(arch, str):
                raise ModelLoadError(f"{path} names no architecture (general.architecture)")
            handle.seek(0)
            keys = {f"{arch}.{k}": k for k in ("block_count", "embedding_length", "attention.head_count",
                                                  "attention.head_count_kv", "context_length", "vocab_size")}
            meta = _read_meta(handle, wanted=(*keys, _VOCAB))
    except OSError as exc:
        raise ModelLoadError(f"cannot read {path}: {exc.strerror}") from None
    except (struct.error, UnicodeDecodeError, ValueError):
        raise ModelLoadError(f"{path} is not a valid GGUF file (its header is cut short or damaged)") from None
    get = {short: meta.get(full) for full, short in keys.items()}
    n_head = _first(get["attention.head_count"]) or 1
    return ModelShape(
        file_bytes=_file_bytes(path),
        n_layer=int(get["block_count"] or 0),
        n_embd=int(get["embedding_length"] or 0),
        n_head=int(n_head),
        n_head_kv=int(_first(get["attention.head_count_kv"]) or n_head),
        n_ctx_train=int(get["context_length"] or 0),
        n_vocab=int(get["vocab_size"] or meta.get(_VOCAB) or 0),
    )


def estimate(shape: ModelShape, *, n_ctx_seq: int, n_seq: int, n_batch: int, reserve: int,
             drafted_rows: int = 0) -> MemoryEstimate:
    """What llama.cpp will allocate: the weights (the file), an f16 KV cache of n_ctx_seq tokens for
    each of n_seq sequences, and compute buffers (logits rows, one a sequence and `drafted_rows`
    more with speculative drafts; one batch's activations and attention scores) plus `reserve` for
    the rest of the graph."""
    head_dim = shape.n_embd // max(shape.n_head, 1)
    n_kv_tokens = n_ctx_seq * n_seq
    kv = 2 * shape.n_layer * n_kv_tokens * head_dim * shape.n_head_kv * F16_BYTES
    logits = (n_seq + drafted_rows) * shape.n_vocab * 4
    activations = n_batch * shape.n_embd * 4 * 8
    scores = n_batch * shape.n_head * min(n_kv_tokens, n_ctx_seq) * 4
    return MemoryEstimate(shape.file_bytes, kv, logits + activations + scores + reserve)


def _first(value):
    return value[0] if isinstance(value, list) and value else value


def _file_bytes(path: str) -> int:
    """The file's size; a split model's first part stands for all of them."""
    split = _SPLIT.search(path)
    if split is None:
        return os.path.getsize(path)
    prefix, parts = path[:split.start()], int(split.group(2))
    total = 0
    for part in range(1, parts + 1):
        try:
            total += os.path.getsize(f"{prefix}-{part:05d}-of-{parts:05d}.gguf")
        except OSError:
            raise ModelLoadError(f"{path}: part {part} of {parts} is missing") from None
    return total


def _read_meta(handle: BinaryIO, wanted: tuple[str, ...]) -> dict:
    """The wanted keys' values (an array of strings: its length); stops once all are found."""
    if handle.read(4) != GGUF_MAGIC:
        raise ValueError("not GGUF")
    version, _n_tensors, n_kv = struct.unpack("<IQQ", handle.read(20))
    if version < 2:
        raise ValueError("GGUF v1 is not supported")
    found: dict = {}
    for _ in range(n_kv):
        key = _string(handle)
        kind = struct.unpack("<I", handle.read(4))[0]
        if kind == _ARRAY and key == _VOCAB:
            # its length is all we want of it; the writers put it after every architecture key
            found[key] = struct.unpack("<IQ", handle.read(12))[1]
            break
        found_value = _value(handle, kind, keep=key in wanted)
        if key in wanted:
            found[key] = found_value
            if len(found) == len(wanted):
                break
    return found


def _string(handle: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", handle.read(8))
    if length > 1 << 30:
        raise ValueError("string too long")
    return handle.read(length).decode("utf-8")


def _value(handle: BinaryIO, kind: int, keep: bool):
    if kind in _SCALARS:
        fmt = _SCALARS[kind]
        return struct.unpack(fmt, handle.read(struct.calcsize(fmt)))[0]
    if kind == _STRING:
        return _string(handle)
    if kind != _ARRAY:
        raise ValueError(f"unknown GGUF value type {kind}")
    item, count = struct.unpack("<IQ", handle.read(12))
    if item in _SCALARS:
        size = struct.calcsize(_SCALARS[item])
        data = handle.read(size * count)
        if len(data) != size * count:
            raise ValueError("cut short")
        return list(struct.unpack(f"<{count}{_SCALARS[item][1]}", data)) if keep and count <= 4096 else count
    for _ in range(count):          # strings (a vocabulary) or nested arrays: walked, not kept
        if item == _STRING:
            (length,) = struct.unpack("<Q", handle.read(8))
            handle.seek(length, os.SEEK_CUR)
        else:
            _value(handle, item, keep=False)
    return count
