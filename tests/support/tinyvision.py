"""A tiny random-weight vision projector (an ``mmproj`` GGUF) that the real libmtmd loads.

:func:`write_tiny_mmproj` writes a LLaVA-style projector (``clip.projector_type`` ``mlp``):
a ViT of ``n_layer`` blocks over a ``image_size``² image cut into ``patch_size``² patches,
then a two-layer MLP whose output is as wide as the text model's embedding
(``n_embd_text``; libmtmd refuses a projector whose width differs from the model's). Every
image becomes ``(image_size // patch_size) ** 2`` embedding positions (16 by default), one
image chunk of that many tokens, whatever the picture's size: libmtmd resizes it first.

What clip.cpp requires of an ``mlp`` projector (llama.cpp's tools/mtmd/clip.cpp,
``load_hparams`` and ``load_tensors``; ``clip_graph_llava`` runs it):

- keys ``clip.has_vision_encoder``, ``clip.projector_type``, ``clip.vision.`` +
  ``embedding_length``, ``attention.head_count``, ``feed_forward_length``,
  ``block_count``, ``projection_dim``, ``attention.layer_norm_epsilon``, ``image_size``,
  ``patch_size``, and ``image_mean`` / ``image_std`` of three floats each;
- tensors ``v.patch_embd.weight`` (the patch convolution), ``v.position_embd.weight``
  (one row per patch), per block ``attn_q/k/v/out``, ``ln1``, ``ln2``, ``ffn_up``,
  ``ffn_down``, and the projector ``mm.0`` and ``mm.2`` (``mm.2``'s rows are the output
  width). The graph runs the blocks but the last, as LLaVA takes the next-to-last layer.

:func:`png_bytes` and :func:`bmp_bytes` make small images with the standard library alone.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tinymodel import write_gguf  # tests/support/

__all__ = ["GEMMA3_TEXT", "IMAGE_TOKENS", "QWEN2VL_TEXT", "bmp_bytes", "checkerboard", "png_bytes", "solid", "write_tiny_mmproj",
           "write_tiny_gemma3_mmproj", "write_tiny_qwen2vl_mmproj"]

#: Embedding positions every image takes with the default projector (a 4×4 grid of patches).
IMAGE_TOKENS = 16


def _vit_meta(name: str, projector: str, *, n_embd: int, n_head: int, n_ff: int, n_layer: int, n_embd_text: int,
              image_size: int, patch_size: int, eps: float, **extra: Any) -> dict[str, Any]:
    """The clip.* keys every tiny projector writes: its ViT's shape, the text model's width, the
    picture's size and normalisation (``extra``: the projector's own keys)."""
    return {
        "general.name": name, "general.file_type": 0,
        "clip.has_vision_encoder": True, "clip.projector_type": projector, "clip.use_gelu": True,
        "clip.vision.embedding_length": n_embd, "clip.vision.attention.head_count": n_head,
        "clip.vision.feed_forward_length": n_ff, "clip.vision.block_count": n_layer,
        "clip.vision.projection_dim": n_embd_text, "clip.vision.attention.layer_norm_epsilon": eps,
        "clip.vision.image_size": image_size, "clip.vision.patch_size": patch_size,
        "clip.vision.image_mean": [0.5, 0.5, 0.5], "clip.vision.image_std": [0.5, 0.5, 0.5], **extra,
    }


def write_tiny_mmproj(
    path: str | os.PathLike[str],
    *,
    n_embd_text: int = 64,
    n_embd: int = 32,
    n_head: int = 2,
    n_ff: int = 48,
    n_layer: int = 2,
    image_size: int = 32,
    patch_size: int = 8,
    seed: int = 0,
) -> Path:
    """Write a tiny ``mlp`` vision projector for a text model ``n_embd_text`` wide."""
    if image_size % patch_size:
        raise ValueError("image_size must be a multiple of patch_size")
    n_patches = (image_size // patch_size) ** 2
    rng = np.random.default_rng(seed)

    def rand(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    meta = _vit_meta("tiny-random-mmproj", "mlp", n_embd=n_embd, n_head=n_head, n_ff=n_ff, n_layer=n_layer,
                     n_embd_text=n_embd_text, image_size=image_size, patch_size=patch_size, eps=1e-5)
    # numpy shapes are ggml's reversed: the convolution kernel is (out, in, h, w).
    proj = 1.0 / np.sqrt(n_embd)
    tensors: list[tuple[str, np.ndarray]] = [
        ("v.patch_embd.weight", rand(n_embd, 3, patch_size, patch_size, std=1.0 / patch_size)),
        ("v.patch_embd.bias", zeros(n_embd)),
        ("v.position_embd.weight", rand(n_patches, n_embd, std=0.1)),
    ]
    for i in range(n_layer):
        b = f"v.blk.{i}"
        tensors += [
            (f"{b}.ln1.weight", ones(n_embd)), (f"{b}.ln1.bias", zeros(n_embd)),
            (f"{b}.attn_q.weight", rand(n_embd, n_embd, std=proj)), (f"{b}.attn_q.bias", zeros(n_embd)),
            (f"{b}.attn_k.weight", rand(n_embd, n_embd, std=proj)), (f"{b}.attn_k.bias", zeros(n_embd)),
            (f"{b}.attn_v.weight", rand(n_embd, n_embd, std=proj)), (f"{b}.attn_v.bias", zeros(n_embd)),
            (f"{b}.attn_out.weight", rand(n_embd, n_embd, std=proj)), (f"{b}.attn_out.bias", zeros(n_embd)),
            (f"{b}.ln2.weight", ones(n_embd)), (f"{b}.ln2.bias", zeros(n_embd)),
            (f"{b}.ffn_up.weight", rand(n_ff, n_embd, std=proj)), (f"{b}.ffn_up.bias", zeros(n_ff)),
            (f"{b}.ffn_down.weight", rand(n_embd, n_ff, std=1.0 / np.sqrt(n_ff))),
            (f"{b}.ffn_down.bias", zeros(n_embd)),
        ]
    # The projector's output lands where token embeddings do: of about their scale (std 1).
    tensors += [
        ("mm.0.weight", rand(n_embd_text, n_embd, std=proj)), ("mm.0.bias", zeros(n_embd_text)),
        ("mm.2.weight", rand(n_embd_text, n_embd_text, std=2.0 / np.sqrt(n_embd_text))),
        ("mm.2.bias", zeros(n_embd_text)),
    ]
    write_gguf(path, "clip", meta, tensors)
    return Path(path)


#: write_tiny_gguf(**QWEN2VL_TEXT): a text model that places tokens by M-RoPE, as Qwen2-VL's does
#: (rope sections over its 16-wide heads' 8 rotated pairs).
QWEN2VL_TEXT = {"arch": "qwen2vl", "extra_metadata": {"qwen2vl.rope.dimension_sections": [2, 3, 3, 0]}}


def write_tiny_qwen2vl_mmproj(path: str | os.PathLike[str], *, n_embd_text: int = 64, n_embd: int = 32,
                              n_head: int = 2, n_ff: int = 48, n_layer: int = 1, patch_size: int = 14,
                              seed: int = 0) -> Path:
    """A tiny Qwen2-VL projector (``qwen2vl_merger``): M-RoPE inside the ViT, 2x2 patches merged
    into one token, and an image of w x h tokens at max(w, h) positions in the text model (pair
    it with a QWEN2VL_TEXT model). The picture keeps its aspect: its token count depends on its
    size. clip.cpp's graph (tools/mtmd/models/qwen2vl.cpp) needs two patch convolutions (the
    second for a video's next frame), q/k/v with biases, and ``mm.0`` / ``mm.2`` over four
    merged patches; no position embeddings."""
    rng = np.random.default_rng(seed)

    def rand(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    meta = _vit_meta("tiny-random-qwen2vl-mmproj", "qwen2vl_merger", n_embd=n_embd, n_head=n_head, n_ff=n_ff,
                     n_layer=n_layer, n_embd_text=n_embd_text, image_size=560, patch_size=patch_size, eps=1e-6)
    kernel = 1.0 / (patch_size * 4)
    tensors: list[tuple[str, np.ndarray]] = [
        ("v.patch_embd.weight", rand(n_embd, 3, patch_size, patch_size, std=kernel)),
        ("v.patch_embd.weight.1", rand(n_embd, 3, patch_size, patch_size, std=kernel)),
    ]
    proj = 1.0 / np.sqrt(n_embd)
    for i in range(n_layer):
        b = f"v.blk.{i}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors += [(f"{b}.{name}.weight", rand(n_embd, n_embd, std=proj)), (f"{b}.{name}.bias", zeros(n_embd))]
        tensors += [
            (f"{b}.ln1.weight", np.ones(n_embd, dtype=np.float32)), (f"{b}.ln1.bias", zeros(n_embd)),
            (f"{b}.ln2.weight", np.ones(n_embd, dtype=np.float32)), (f"{b}.ln2.bias", zeros(n_embd)),
            (f"{b}.ffn_up.weight", rand(n_ff, n_embd, std=proj)), (f"{b}.ffn_up.bias", zeros(n_ff)),
            (f"{b}.ffn_down.weight", rand(n_embd, n_ff, std=1.0 / np.sqrt(n_ff))), (f"{b}.ffn_down.bias", zeros(n_embd)),
        ]
    merged = 4 * n_embd
    tensors += [
        ("mm.0.weight", rand(merged, merged, std=1.0 / np.sqrt(merged))), ("mm.0.bias", zeros(merged)),
        ("mm.2.weight", rand(n_embd_text, merged, std=2.0 / np.sqrt(merged))), ("mm.2.bias", zeros(n_embd_text)),
    ]
    write_gguf(path, "clip", meta, tensors)
    return Path(path)


#: write_tiny_gguf(**GEMMA3_TEXT): a Gemma 3 text model (sliding-window layers, the image's
#: wrapping tokens in its vocabulary) for write_tiny_gemma3_mmproj's projector.
GEMMA3_TEXT = {"arch": "gemma3", "special_tokens": ["<start_of_image>", "<end_of_image>"],
               "extra_metadata": {"gemma3.attention.sliding_window": 512}}


def write_tiny_gemma3_mmproj(path: str | os.PathLike[str], *, n_embd_text: int = 64, n_embd: int = 32,
                             n_head: int = 2, n_ff: int = 48, n_layer: int = 1, image_size: int = 64,
                             patch_size: int = 4, merge: int = 2, seed: int = 0) -> Path:
    """A tiny Gemma 3 projector (``gemma3``): a SigLIP ViT over ``image_size``² cut into
    ``patch_size``² patches, average-pooled ``merge`` × ``merge`` (clip.cpp reads the pool's size
    from ``clip.vision.projector.scale_factor``; real Gemma 3 pools 4 × 4), then an RMS norm
    (``mm.soft_emb_norm``) and a projection (``mm.input_projection``, stored as the text model's
    width × the ViT's). An image is ``(image_size // patch_size // merge) ** 2`` tokens (64 by
    default) whatever its size, and libmtmd decodes them with attention both ways
    (mtmd_decode_use_non_causal): in one batch."""
    side = image_size // patch_size
    if image_size % patch_size or side % merge:
        raise ValueError("image_size must be a multiple of patch_size * merge")
    rng = np.random.default_rng(seed)

    def rand(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def zeros(n: int) -> np.ndarray:
        return np.zeros(n, dtype=np.float32)

    meta = _vit_meta("tiny-random-gemma3-mmproj", "gemma3", n_embd=n_embd, n_head=n_head, n_ff=n_ff,
                     n_layer=n_layer, n_embd_text=n_embd_text, image_size=image_size, patch_size=patch_size,
                     eps=1e-6, **{"clip.vision.projector.scale_factor": merge})
    proj = 1.0 / np.sqrt(n_embd)
    tensors: list[tuple[str, np.ndarray]] = [
        ("v.patch_embd.weight", rand(n_embd, 3, patch_size, patch_size, std=1.0 / patch_size)),
        ("v.patch_embd.bias", zeros(n_embd)),
        ("v.position_embd.weight", rand(side * side, n_embd, std=0.1)),
    ]
    for i in range(n_layer):
        b = f"v.blk.{i}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors += [(f"{b}.{name}.weight", rand(n_embd, n_embd, std=proj)), (f"{b}.{name}.bias", zeros(n_embd))]
        tensors += [
            (f"{b}.ln1.weight", np.ones(n_embd, dtype=np.float32)), (f"{b}.ln1.bias", zeros(n_embd)),
            (f"{b}.ln2.weight", np.ones(n_embd, dtype=np.float32)), (f"{b}.ln2.bias", zeros(n_embd)),
            (f"{b}.ffn_up.weight", rand(n_ff, n_embd, std=proj)), (f"{b}.ffn_up.bias", zeros(n_ff)),
            (f"{b}.ffn_down.weight", rand(n_embd, n_ff, std=1.0 / np.sqrt(n_ff))), (f"{b}.ffn_down.bias", zeros(n_embd)),
        ]
    tensors += [
        ("v.post_ln.weight", np.ones(n_embd, dtype=np.float32)), ("v.post_ln.bias", zeros(n_embd)),
        ("mm.soft_emb_norm.weight", np.ones(n_embd, dtype=np.float32)),
        # (ViT width, text width) in numpy: ggml's ne0 is the text width, as clip.cpp reads it
        ("mm.input_projection.weight", rand(n_embd, n_embd_text, std=proj)),
    ]
    write_gguf(path, "clip", meta, tensors)
    return Path(path)


# ---- images, made with the standard library ------------------------------------------

Pixel = tuple[int, int, int]


def solid(width: int, height: int, color: Pixel) -> list[list[Pixel]]:
    """Rows of pixels, every one ``color``."""
    return [[color] * width for _ in range(height)]


def checkerboard(width: int, height: int, a: Pixel = (0, 0, 0), b: Pixel = (255, 255, 255),
                 cell: int = 4) -> list[list[Pixel]]:
    """Rows of pixels in squares of ``cell`` pixels, ``a`` and ``b`` alternating."""
    return [[a if (x // cell + y // cell) % 2 == 0 else b for x in range(width)] for y in range(height)]


def png_bytes(rows: Sequence[Sequence[Pixel]]) -> bytes:
    """An 8-bit RGB PNG of these rows of pixels."""
    height, width = len(rows), len(rows[0])
    raw = b"".join(b"\x00" + bytes(c for px in row for c in px) for row in rows)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw))
            + chunk(b"IEND", b""))


def bmp_bytes(rows: Sequence[Sequence[Pixel]]) -> bytes:
    """A 24-bit BMP of these rows of pixels (stored bottom-up, rows padded to 4 bytes)."""
    height, width = len(rows), len(rows[0])
    pad = (4 - (width * 3) % 4) % 4
    pixels = b"".join(bytes(c for r, g, b in row for c in (b, g, r)) + b"\x00" * pad
                      for row in reversed(rows))
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, len(pixels), 2835, 2835, 0, 0)
    head = struct.pack("<2sIHHI", b"BM", 14 + len(info) + len(pixels), 0, 0, 14 + len(info))
    return head + info + pixels
