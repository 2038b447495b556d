"""Tiny random-weight GGUF models that the real llama.cpp engine loads and runs.

A model written by :func:`write_tiny_gguf` is a genuine ``llama``-architecture
GGUF file (f32 weights, SPM vocabulary) of about half a megabyte.  It loads in
milliseconds and decodes through the real engine; its output is noise, so a test
that needs particular text forces it with a GBNF grammar or a logit bias.

Token-id layout (stable: it does not depend on ``special_tokens``)::

    0                      <unk>   UNKNOWN
    1                      <s>     CONTROL  (bos)
    2                      </s>    CONTROL  (eos)
    3 ..                   CHAT_CONTROL_TOKENS, CONTROL, in that order
    BYTE_TOKEN_OFFSET + b  <0xBB>  BYTE, for every byte value b in 0..255
    then                   the printable ASCII characters, one each (space as "▁")
    then                   multi-character pieces (words, JSON punctuation)
    then                   the caller's ``special_tokens``, in the order given

:func:`tiny_vocab` returns that list and :func:`token_ids` maps text to id.

Forcing special tokens with a GBNF grammar (llama.cpp in llama-cpp-python 0.3.36,
shown by tests/e2e/test_tinymodel.py): ``<tool_call>`` (bare, text must be ``<...>``)
or ``<[id]>`` matches exactly that one token; the string literal
``"<tool_call>"`` matches the token *or* its characters; ``[TOOL_CALLS]`` bare is
a character class, so use ``<[id]>``.  Never reference an EOG token in a grammar:
it can never be sampled, and the process aborts.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGUFValueType, GGUFWriter, TokenType
from gguf import quants as gguf_quants

__all__ = [
    "BOS_ID",
    "BYTE_TOKEN_OFFSET",
    "CHATML_TEMPLATE",
    "CHAT_CONTROL_TOKENS",
    "EOS_ID",
    "FIM_TOKENS",
    "FIM_LAYOUTS",
    "NO_EOG",
    "GEMMA_TEMPLATE",
    "UNK_ID",
    "byte_token_id",
    "tiny_vocab",
    "token_ids",
    "write_tiny_gguf",
]

UNK_ID = 0
BOS_ID = 1
EOS_ID = 2

# Control tokens of the common chat templates (ChatML, Gemma, Llama 3, Mistral,
# Phi 3).  llama.cpp marks a token as end-of-generation by its text, so
# <|im_end|>, <end_of_turn>, <|eot_id|>, <|endoftext|> and <|end|> are EOG in
# every tiny model, as is </s> (the eos token).
CHAT_CONTROL_TOKENS: tuple[str, ...] = (
    "<|im_start|>",
    "<|im_end|>",
    "<start_of_turn>",
    "<end_of_turn>",
    "<|begin_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|endoftext|>",
    "[INST]",
    "[/INST]",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
)

BYTE_TOKEN_OFFSET = 3 + len(CHAT_CONTROL_TOKENS)

# Multi-character pieces.  SPM only merges two adjacent symbols into a piece that
# is itself in the vocabulary, so every prefix of these is added too.
_WORDS: tuple[str, ...] = (
    "▁the", "▁and", "▁to", "▁of", "▁is", "▁in", "▁it", "▁you", "▁that", "▁for",
    "▁with", "▁this", "▁are", "▁be", "▁not", "▁on", "▁as", "▁at", "▁we",
    "Hello", "▁Hello", "hello", "▁hello", "▁world", "world",
    "user", "assistant", "system", "name", "arguments", "content", "role",
    "true", "false", "null", "ing", "ed", "er",
    '{"', '":', '",', '"}', '":▁"', '",▁"', '▁{"', "}}", "]}", "[{",
)

_CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
#: A minimal ChatML template; renders only to CHAT_CONTROL_TOKENS and text.
CHATML_TEMPLATE = _CHATML

#: A minimal Gemma-style template (no system role: system text is prepended).
GEMMA_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else 'user' %}"
    "{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

_TYPES = {"control": TokenType.CONTROL, "user_defined": TokenType.USER_DEFINED}

def _pieces(words: Iterable[str] = _WORDS, shortest: int = 2) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for word in words:
        for end in range(shortest, len(word) + 1):
            piece = word[:end]
            if piece not in seen:
                seen.add(piece)
                out.append(piece)
    return out


def _normalize_special(special_tokens: Iterable[Any]) -> list[tuple[str, int]]:
    out = []
    for item in special_tokens:
        if isinstance(item, str):
            text, kind = item, "control"
        else:
            text, kind = item
        if kind not in _TYPES:
            raise ValueError(f"special token type must be 'control' or 'user_defined', not {kind!r}")
        if not text:
            raise ValueError("special token text must not be empty")
        out.append((text, int(_TYPES[kind])))
    return out


def tiny_vocab(special_tokens: Sequence[Any] = (), words: Sequence[str] = ()) -> list[tuple[str, float, int]]:
    """The vocabulary as (text, score, gguf.TokenType) tuples; the index is the id.

    ``words``: more multi-character pieces (spaces as " " or "▁"), after the built-in ones and
    before the special tokens, every prefix with them: a larger vocabulary, so that long prompts
    are fewer tokens. The ids of the built-in tokens do not depend on it.

    A special token whose text is already in the vocabulary with the same type
    keeps its existing id; with a different type it is an error.
    """
    vocab: list[tuple[str, float, int]] = [
        ("<unk>", 0.0, int(TokenType.UNKNOWN)),
        ("<s>", 0.0, int(TokenType.CONTROL)),
        ("</s>", 0.0, int(TokenType.CONTROL)),
    ]
    vocab += [(t, 0.0, int(TokenType.CONTROL)) for t in CHAT_CONTROL_TOKENS]
    assert len(vocab) == BYTE_TOKEN_OFFSET
    vocab += [(f"<0x{b:02X}>", 0.0, int(TokenType.BYTE)) for b in range(256)]
    chars = ["▁"] + [chr(c) for c in range(0x21, 0x7F)]
    vocab += [(c, -1.0, int(TokenType.NORMAL)) for c in chars]
    # SPM merges the highest-scoring bigram first: prefer longer pieces.
    vocab += [(p, float(len(p)), int(TokenType.NORMAL)) for p in _pieces()]
    if words:
        known = {text for text, _, _ in vocab}
        more = _pieces((w.replace(" ", "\u2581") for w in words), shortest=1)   # a non-ASCII first character too
        vocab += [(p, float(len(p)), int(TokenType.NORMAL)) for p in more if p not in known]

    index = {text: i for i, (text, _, _) in enumerate(vocab)}
    for text, ttype in _normalize_special(special_tokens):
        if text in index:
            if vocab[index[text]][2] != ttype:
                raise ValueError(f"special token {text!r} already in the vocabulary with another type")
            continue
        index[text] = len(vocab)
        vocab.append((text, 0.0, ttype))
    return vocab


def tokenizer_metadata(vocab: Sequence[tuple[str, float, int]]) -> dict[str, Any]:
    """The GGUF tokenizer keys of a model on tiny_vocab()."""
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [t for t, _, _ in vocab],
        "tokenizer.ggml.scores": [float(s) for _, s, _ in vocab],
        "tokenizer.ggml.token_type": [int(k) for _, _, k in vocab],
        "tokenizer.ggml.bos_token_id": BOS_ID,
        "tokenizer.ggml.eos_token_id": EOS_ID,
        "tokenizer.ggml.unknown_token_id": UNK_ID,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_eos_token": False,
        # Gemma-style: text is tokenized as given, with no "▁" put in front of it
        # (nor after every special token, which is what SPM's default does).
        "tokenizer.ggml.add_space_prefix": False,
    }


def token_ids(special_tokens: Sequence[Any] = ()) -> dict[str, int]:
    """Map from token text (as stored, spaces as "▁") to id."""
    return {text: i for i, (text, _, _) in enumerate(tiny_vocab(special_tokens))}


def byte_token_id(byte: int) -> int:
    """Id of the byte-fallback token <0xXX> for one byte value."""
    if not 0 <= byte <= 255:
        raise ValueError(byte)
    return BYTE_TOKEN_OFFSET + byte


def _typed(value: Any) -> tuple[Any, GGUFValueType, GGUFValueType | None]:
    """Pick the GGUF type for a metadata value (ints become UINT32, or INT32 if negative)."""
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], GGUFValueType):
        val, vtype = value
        sub = None
        if vtype == GGUFValueType.ARRAY:
            sub = _typed(val[0])[1] if val else GGUFValueType.INT32
        return val, vtype, sub
    if isinstance(value, bool):
        return value, GGUFValueType.BOOL, None
    if isinstance(value, int):
        return value, (GGUFValueType.UINT32 if value >= 0 else GGUFValueType.INT32), None
    if isinstance(value, float):
        return value, GGUFValueType.FLOAT32, None
    if isinstance(value, str):
        return value, GGUFValueType.STRING, None
    if isinstance(value, (list, np.ndarray)):
        items = list(value)
        if not items:
            return items, GGUFValueType.ARRAY, GGUFValueType.INT32
        first = items[0]
        if isinstance(first, bool):
            sub = GGUFValueType.BOOL
        elif isinstance(first, (int, np.integer)):
            sub = GGUFValueType.INT32
        elif isinstance(first, (float, np.floating)):
            sub = GGUFValueType.FLOAT32
        elif isinstance(first, str):
            sub = GGUFValueType.STRING
        else:
            raise TypeError(f"unsupported array item type {type(first)!r}")
        return items, GGUFValueType.ARRAY, sub
    raise TypeError(f"unsupported metadata value type {type(value)!r}")


def _add(writer: GGUFWriter, key: str, value: Any) -> None:
    val, vtype, sub = _typed(value)
    writer.add_key_value(key, val, vtype, sub)


# Fill-in-the-middle tokens, by role. Their texts are ones llama.cpp does not recognise by
# sight (it does "<|fim_prefix|>", "<PRE>", ...), so only the metadata makes them FIM tokens.
FIM_TOKENS = {"pre": "<fim:pre>", "suf": "<fim:suf>", "mid": "<fim:mid>", "pad": "<fim:pad>",
              "rep": "<fim:rep>", "sep": "<fim:sep>"}
# write_tiny_gguf(fim=...): which roles get metadata keys, and under which names.
FIM_LAYOUTS = {
    "fim": {role: f"tokenizer.ggml.fim_{role}_token_id" for role in ("pre", "suf", "mid", "pad")},
    "repo": {role: f"tokenizer.ggml.fim_{role}_token_id" for role in FIM_TOKENS},
    "legacy": {"pre": "tokenizer.ggml.prefix_token_id", "suf": "tokenizer.ggml.suffix_token_id",
               "mid": "tokenizer.ggml.middle_token_id"},
}


def sliding_window(n_swa: int = 16) -> dict[str, Any]:
    """write_tiny_gguf(**sliding_window(n)): llama.cpp's gemma3 architecture with an n-token window
    on layer 0 and full attention on layer 1, so what a sliding window changes in the KV cache (the
    engine keeps only the window: runtime/swa_checkpoints.py) shows on prompts of a few hundred tokens."""
    return {"arch": "gemma3", "extra_metadata": {"gemma3.attention.sliding_window": n_swa,
                                                 "gemma3.attention.sliding_window_pattern": 2}}


def write_tiny_gguf(
    path: str | os.PathLike[str],
    *,
    chat_template: str | None = None,
    special_tokens: Sequence[Any] = (),
    context_length: int = 2048,
    n_embd: int = 64,
    n_layer: int = 2,
    n_head: int = 1,
    n_ff: int = 128,
    seed: int = 0,
    arch: str = "llama",
    extra_metadata: Mapping[str, Any] | None = None,
    weight_type: Any = None,
    fim: str | None = None,
) -> Path:
    """Write a tiny random-weight llama GGUF model to ``path`` and return the path.

    ``n_head``: one 64-wide head by default: llama.cpp's CPU flash attention decodes four
    16-wide heads several times slower per token (0.94 against 0.11 ms), and the suite decodes
    hundreds of thousands of tokens on these models.

    ``special_tokens``: strings (CONTROL tokens) or ``(text, "control" |
    "user_defined")`` pairs, appended to the vocabulary.  CONTROL tokens are only
    recognised in text when tokenizing with parse_special and only rendered
    with special=True; USER_DEFINED ones always are.

    ``extra_metadata`` overrides or adds keys: a bool, int (UINT32, or INT32 if
    negative), float (FLOAT32), str, list (array), or an explicit
    ``(value, gguf.GGUFValueType)`` pair; ``None`` removes a default key.

    ``arch``: the architecture the keys are named for; ``"gemma3"`` also gets Gemma 3's
    per-layer norms (q and k per head, after attention, after the FFN) its loader requires.

    ``weight_type``: a ``gguf.GGMLQuantizationType`` (Q4_0, Q8_0, ...) for the
    layers' matrices, as a quantised model has them; the rest stays F32.

    ``fim``: a key of FIM_LAYOUTS. The six FIM_TOKENS are appended after
    ``special_tokens`` (CONTROL) and the layout's roles named in the metadata:
    ``"fim"`` prefix, suffix, middle, pad; ``"repo"`` those and repo, file
    separator; ``"legacy"`` prefix, suffix, middle under the older key names.
    """
    if n_embd % n_head:
        raise ValueError("n_embd must be a multiple of n_head")
    path = Path(path)
    if fim is not None:
        special_tokens = [*special_tokens, *FIM_TOKENS.values()]
    vocab = tiny_vocab(special_tokens)
    n_vocab = len(vocab)
    head_dim = n_embd // n_head

    meta: dict[str, Any] = {
        "general.name": "tiny-random-llama",
        "general.file_type": 0,  # ALL_F32
        f"{arch}.vocab_size": n_vocab,
        f"{arch}.context_length": context_length,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.block_count": n_layer,
        f"{arch}.feed_forward_length": n_ff,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_head,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        f"{arch}.rope.dimension_count": head_dim,
        f"{arch}.rope.freq_base": 10000.0,
        **tokenizer_metadata(vocab),
    }
    if chat_template is not None:
        meta["tokenizer.chat_template"] = chat_template
    if fim is not None:
        ids = {text: i for i, (text, _, _) in enumerate(vocab)}
        for role, key in FIM_LAYOUTS[fim].items():
            meta[key] = ids[FIM_TOKENS[role]]
    for key, value in (extra_metadata or {}).items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value

    rng = np.random.default_rng(seed)

    def rand(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    # numpy shapes are (rows, cols) = ggml's (ne1, ne0): GGUFWriter reverses them.
    tensors: list[tuple[str, np.ndarray]] = [
        ("token_embd.weight", rand(n_vocab, n_embd, std=1.0)),
        ("output_norm.weight", np.ones(n_embd, dtype=np.float32)),
    ]
    proj = 1.0 / np.sqrt(n_embd)
    for i in range(n_layer):
        b = f"blk.{i}"
        tensors += [
            (f"{b}.attn_norm.weight", np.ones(n_embd, dtype=np.float32)),
            (f"{b}.attn_q.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_k.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_v.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_output.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.ffn_norm.weight", np.ones(n_embd, dtype=np.float32)),
            (f"{b}.ffn_gate.weight", rand(n_ff, n_embd, std=proj)),
            (f"{b}.ffn_up.weight", rand(n_ff, n_embd, std=proj)),
            (f"{b}.ffn_down.weight", rand(n_embd, n_ff, std=1.0 / np.sqrt(n_ff))),
        ]
        if arch == "gemma3":     # Gemma 3's extra norms: q and k per head, and after attention and FFN
            tensors += [(f"{b}.{name}.weight", np.ones(size, dtype=np.float32))
                        for name, size in (("attn_q_norm", head_dim), ("attn_k_norm", head_dim),
                                           ("post_attention_norm", n_embd), ("post_ffw_norm", n_embd))]
    # Logits come out with a standard deviation of about 2: varied, not degenerate.
    tensors.append(("output.weight", rand(n_vocab, n_embd, std=2.0 * proj)))

    return write_gguf(path, arch, meta, tensors, weight_type)


def write_gguf(path: str | os.PathLike[str], arch: str, meta: Mapping[str, Any],
               tensors: Sequence[tuple[str, np.ndarray]], weight_type: Any = None) -> str | os.PathLike[str]:
    """Write a GGUF file of these metadata keys and tensors; returns `path`. With a
    `weight_type`, the layers' matrices are quantised to it."""
    writer = GGUFWriter(str(path), arch)
    try:
        for key, value in meta.items():
            _add(writer, key, value)
        for name, data in tensors:
            if weight_type is not None and name.startswith("blk.") and data.ndim == 2:
                writer.add_tensor(name, gguf_quants.quantize(data, weight_type), raw_dtype=weight_type)
            else:
                writer.add_tensor(name, data)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return path


#: Texts llama.cpp treats as end of generation in every tiny model (see CHAT_CONTROL_TOKENS).
EOG_TEXTS = ("</s>", "<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>", "<|end|>")

#: A logit_bias banning every end-of-generation token: random weights then keep generating.
NO_EOG = {str(token_ids()[text]): -100 for text in EOG_TEXTS}
