"""What a model file says of itself, read from its GGUF header alone: no weights, no llama.cpp.

Model lists and /api/show describe every model in the catalogue, loaded or not; loading one to
describe it would evict another under --max-models. The header is a flat list of typed
key/value pairs (kept here: scalars, strings, short arrays; of the vocabulary only the tokens
a description needs), then one record per tensor (its shape and type: the parameter count and
the weights' dominant type). Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md

Stdlib only: importing this never loads llama.cpp (a list is answered on a connection thread).
"""

from __future__ import annotations

import collections
import mmap
import os
import struct
import threading
from dataclasses import dataclass, field

MAGIC = b"GGUF"
MAX_STRING_BYTES = 1 << 30          # a longer string is a damaged header
MAX_TENSORS = 1 << 20
KEPT_ARRAY_ITEMS = 64               # arrays longer than this are counted, not kept (but the vocabulary)
VOCAB = "tokenizer.ggml.tokens"

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9
_LENGTH = struct.Struct("<Q")

# llama.cpp's file types (llama_ftype), named as Ollama's details name them
FILE_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K", 11: "Q3_K_S",
              12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S", 17: "Q5_K_M", 18: "Q6_K",
              19: "IQ2_XXS", 20: "IQ2_XS", 21: "Q2_K_S", 22: "IQ3_XS", 23: "IQ3_XXS", 24: "IQ1_S", 25: "IQ4_NL",
              26: "IQ3_S", 27: "IQ3_M", 28: "IQ2_S", 29: "IQ2_M", 30: "IQ4_XS", 31: "IQ1_M", 32: "BF16",
              36: "TQ1_0", 37: "TQ2_0", 38: "MXFP4"}
# ggml's tensor types, for a file that names no file type: its weights' dominant one
TENSOR_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0", 10: "Q2_K", 11: "Q3_K",
                12: "Q4_K", 13: "Q5_K", 14: "Q6_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
                20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 29: "IQ1_M", 30: "BF16", 34: "TQ1_0",
                35: "TQ2_0", 39: "MXFP4"}

# The fill-in-the-middle tokens' texts llama.cpp recognises in a vocabulary (llama-vocab.cpp), when
# the header names no fim token ids: Qwen, OpenCoder, DeepSeek, StarCoder, CodeLlama, GLM-4
FIM_TEXTS = {
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<｜fim▁begin｜>", "<fim_prefix>", "<PRE>", "▁<PRE>", "<|code_prefix|>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<｜fim▁hole｜>", "<fim_suffix>", "<SUF>", "▁<SUF>", "<|code_suffix|>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<｜fim▁end｜>", "<fim_middle>", "<MID>", "▁<MID>", "<|code_middle|>"),
}
WANTED_TOKENS = frozenset({"<think>"})      # the vocabulary's tokens a description asks about


class HeaderError(Exception):
    """The file cannot be read as a GGUF header; the message names it."""


@dataclass(frozen=True)
class Header:
    meta: dict                      # key → value (an array longer than KEPT_ARRAY_ITEMS: its length)
    n_params: int                   # every tensor's elements
    tensor_types: dict[str, int] = field(default_factory=dict)    # type name → elements of that type
    special: frozenset[str] = frozenset()                           # WANTED_TOKENS the vocabulary has
    fim: dict[str, str] = field(default_factory=dict)               # "pre", "suf", "mid" → the token's text
    bos_token: str = ""
    eos_token: str = ""

    @property
    def architecture(self) -> str:
        value = self.meta.get("general.architecture")
        return value if isinstance(value, str) else ""

    def arch_value(self, key: str):
        return self.meta.get(f"{self.architecture}.{key}")

    @property
    def context_length(self) -> int:
        value = self.arch_value("context_length")
        return int(value) if isinstance(value, int) else 0

    @property
    def quantization(self) -> str:
        """The file type as Ollama names it; for a file that names none, its weights' dominant type."""
        kind = self.meta.get("general.file_type")
        if isinstance(kind, int) and kind in FILE_TYPES:
            return FILE_TYPES[kind]
        if not self.tensor_types:
            return ""
        return max(self.tensor_types.items(), key=lambda item: item[1])[0]

    @property
    def chat_template(self) -> str | None:
        value = self.meta.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None

    @property
    def fills_in_the_middle(self) -> bool:
        return all(part in self.fim for part in FIM_TEXTS)


_cache: dict[tuple, Header] = {}
_lock = threading.Lock()


def read_header(path: str) -> Header:
    """The header of the model at `path` (kept while its size and modification time stay)."""
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise HeaderError(f"cannot read {path}: {exc.strerror}") from None
    key = (os.path.realpath(path), stat.st_size, stat.st_mtime_ns)
    with _lock:
        if key in _cache:
            return _cache[key]
    header = _read(path)
    with _lock:
        _cache[key] = header
    return header


def _read(path: str) -> Header:
    try:
        with open(path, "rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return _Reader(data).header()
    except OSError as exc:
        raise HeaderError(f"cannot read {path}: {exc.strerror}") from None
    except (struct.error, UnicodeDecodeError, ValueError, IndexError) as exc:
        raise HeaderError(f"{path} is not a valid GGUF file ({exc})") from None


class _Reader:
    """One pass over the header in memory (mapped: only the pages read are touched)."""

    def __init__(self, data):
        self.data = data
        self.at = 0

    def take(self, fmt: str):
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += struct.calcsize(fmt)
        return values[0] if len(values) == 1 else values

    def string(self) -> str:
        length = self.take("<Q")
        if length > MAX_STRING_BYTES or self.at + length > len(self.data):
            raise ValueError("a string runs past the end of the file")
        text = bytes(self.data[self.at:self.at + length]).decode("utf-8")
        self.at += length
        return text

    def header(self) -> Header:
        if bytes(self.data[:4]) != MAGIC:
            raise ValueError("no GGUF magic")
        self.at = 4
        version, n_tensors, n_kv = self.take("<IQQ")
        if version < 2:
            raise ValueError("GGUF v1 is not supported")
        if n_tensors > MAX_TENSORS:
            raise ValueError(f"{n_tensors} tensors")
        meta: dict = {}
        tokens: list[bytes] = []
        for _ in range(n_kv):
            key = self.string()
            kind = self.take("<I")
            if kind == _ARRAY and key == VOCAB:
                tokens = self.vocabulary()
                meta[key] = len(tokens)
            else:
                meta[key] = self.value(kind)
        n_params, types = self.tensors(n_tensors)
        have = set(tokens)
        wanted = frozenset(text for text in WANTED_TOKENS if text.encode() in have)
        return Header(meta, n_params, types, wanted, _fim_texts(meta, tokens, have),
                      _token(tokens, meta.get("tokenizer.ggml.bos_token_id")),
                      _token(tokens, meta.get("tokenizer.ggml.eos_token_id")))

    def value(self, kind: int):
        if kind in _SCALARS:
            return self.take(_SCALARS[kind])
        if kind == _STRING:
            return self.string()
        if kind != _ARRAY:
            raise ValueError(f"unknown value type {kind}")
        item, count = self.take("<IQ")
        if item in _SCALARS:
            size = struct.calcsize(_SCALARS[item])
            if self.at + size * count > len(self.data):
                raise ValueError("an array runs past the end of the file")
            kept = list(struct.unpack_from(f"<{count}{_SCALARS[item][1]}", self.data, self.at)) \
                if count <= KEPT_ARRAY_ITEMS else count
            self.at += size * count
            return kept
        if count > KEPT_ARRAY_ITEMS and item == _STRING:      # merges: stepped over
            self.skip_strings(count)
            return count
        values = [self.value(item) for _ in range(count)]
        return values if count <= KEPT_ARRAY_ITEMS else count

    def vocabulary(self) -> list[bytes]:
        """The token texts, undecoded (262k of them for Gemma: a tight loop, 0.1 s)."""
        item, count = self.take("<IQ")
        if item != _STRING:
            raise ValueError("the vocabulary is not an array of strings")
        data, at, length = self.data, self.at, _LENGTH.unpack_from
        tokens = []
        for _ in range(count):
            (size,) = length(data, at)
            tokens.append(data[at + 8:at + 8 + size])
            at += 8 + size
        if at > len(data):
            raise ValueError("the vocabulary runs past the end of the file")
        self.at = at
        return tokens

    def skip_strings(self, count: int) -> None:
        data, at, length = self.data, self.at, _LENGTH.unpack_from
        for _ in range(count):
            at += 8 + length(data, at)[0]
        self.at = at

    def tensors(self, n_tensors: int) -> tuple[int, dict[str, int]]:
        total = 0
        types: dict[str, int] = collections.Counter()
        for _ in range(n_tensors):
            self.string()
            n_dims = self.take("<I")
            elements = 1
            for _ in range(n_dims):
                elements *= self.take("<Q")
            kind = self.take("<I")
            self.take("<Q")         # its offset in the data
            total += elements
            types[TENSOR_TYPES.get(kind, f"type {kind}")] += elements
        return total, dict(types)


def _fim_texts(meta: dict, tokens: list[bytes], have: set[bytes]) -> dict[str, str]:
    """The fill-in-the-middle tokens' texts, found as llama.cpp finds them: the header's ids (the
    fim_* keys, or the older prefix/suffix/middle ones), else a text it knows in the vocabulary."""
    found = {}
    for part, older in (("pre", "prefix"), ("suf", "suffix"), ("mid", "middle")):
        token_id = meta.get(f"tokenizer.ggml.fim_{part}_token_id", meta.get(f"tokenizer.ggml.{older}_token_id"))
        text = _token(tokens, token_id) or next((t for t in FIM_TEXTS[part] if t.encode() in have), "")
        if text:
            found[part] = text
    return found


def _token(tokens: list[bytes], token_id) -> str:
    if not isinstance(token_id, int) or not 0 <= token_id < len(tokens):
        return ""
    return bytes(tokens[token_id]).decode("utf-8", "replace")
