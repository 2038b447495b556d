"""A tiny random-weight audio projector (an ``mmproj`` GGUF) that the real libmtmd loads, and
audio made with the standard library.

:func:`write_tiny_audio_mmproj` writes an Ultravox projector (``clip.projector_type``
``ultravox``), the simplest audio encoder libmtmd has that needs no tokens of its own around a
clip (Qwen2-Audio wraps one in ``<|audio_bos|>`` ... ``<|audio_eos|>``): a Whisper encoder of
``n_layer`` blocks, frames stacked ``stack_factor`` at a time, and a SwiGLU projector whose output
is as wide as the text model's embedding (``n_embd_text``). libmtmd turns audio into 16 kHz
log-mel frames (``n_mel`` bins, 100 a second) and cuts them into 30-second windows of 3000
frames, each one audio chunk; the last window is always padded with silence, and a clip shorter
than 30 s is one window. A window's two convolutions halve it to 1500 positions, so a window
becomes ``ceil(1500 / stack_factor)`` embedding positions (:func:`audio_tokens`).

What clip.cpp requires of an ``ultravox`` projector (llama.cpp's tools/mtmd/clip.cpp,
``load_hparams``, ``load_tensors``; models/whisper-enc.cpp runs it):

- keys ``clip.has_audio_encoder``, ``clip.projector_type`` (or ``clip.audio.projector_type``
  where vision is there too), ``clip.audio.`` + ``embedding_length``,
  ``attention.head_count``, ``feed_forward_length``, ``block_count``, ``projection_dim``,
  ``attention.layer_norm_epsilon``, ``num_mel_bins``, ``projector.stack_factor``;
- tensors ``a.conv1d.1`` (n_mel -> n_embd, kernel 3) and ``a.conv1d.2`` (stride 2), their
  biases one column wide, ``a.position_embd.weight`` of at least 1500 rows, per block
  ``ln1``, ``ln2``, ``attn_q`` / ``attn_v`` / ``attn_out`` with biases, ``attn_k`` without one,
  ``ffn_up`` / ``ffn_down``; the projector's ``mm.a.norm_pre`` (n_embd * stack_factor wide),
  ``mm.a.mlp.1`` (to twice the hidden width: SwiGLU halves it), ``mm.a.norm_mid`` and
  ``mm.a.mlp.2`` (to the text width).

The stack factor must agree with itself: libmtmd counts a window's tokens as
``ceil(3000 / s) // 2`` and the graph makes ``ceil(1500 / s)``; where the two differ (s = 7, 8)
the first clip aborts the process, and the server refuses such a projector at load
(engine/audio.py's stacking_refusal). :func:`write_tiny_av_mmproj` writes one file with
both encoders, the vision one of tinyvision.py.
"""

from __future__ import annotations

import io
import math
import os
import struct
import wave
from pathlib import Path
from typing import Any

import numpy as np

from tinymodel import write_gguf  # tests/support/
from tinyvision import write_tiny_mmproj

__all__ = ["SAMPLE_RATE", "audio_tokens", "flac_bytes", "flac_with_blocks", "mp3_bytes", "mp3_hiding_frames",
           "silent_mp3_frames", "tone", "wav_bytes", "with_xing", "write_tiny_audio_mmproj", "write_tiny_av_mmproj"]

#: The rate libmtmd's Whisper front end resamples everything to.
SAMPLE_RATE = 16000
WINDOW_POSITIONS = 1500                 # a 30-second window after the convolutions


def audio_tokens(stack_factor: int = 16) -> int:
    """Embedding positions of one 30-second window (a clip of up to 30 s is one)."""
    return -(-WINDOW_POSITIONS // stack_factor)


def _audio_tensors(rng: np.random.Generator, *, n_embd_text: int, n_embd: int, n_ff: int, n_layer: int,
                   n_mel: int, stack_factor: int, hidden: int) -> list[tuple[str, np.ndarray]]:
    def rand(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def zeros(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=np.float32)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    proj = 1.0 / np.sqrt(n_embd)
    # numpy shapes are ggml's reversed: a conv1d kernel is (out, in, k); its bias a column
    tensors: list[tuple[str, np.ndarray]] = [
        ("a.conv1d.1.weight", rand(n_embd, n_mel, 3, std=1.0 / np.sqrt(3 * n_mel))),
        ("a.conv1d.1.bias", zeros(n_embd, 1)),
        ("a.conv1d.2.weight", rand(n_embd, n_embd, 3, std=1.0 / np.sqrt(3 * n_embd))),
        ("a.conv1d.2.bias", zeros(n_embd, 1)),
        ("a.position_embd.weight", rand(WINDOW_POSITIONS, n_embd, std=0.1)),
    ]
    for i in range(n_layer):
        b = f"a.blk.{i}"
        tensors += [
            (f"{b}.ln1.weight", ones(n_embd)), (f"{b}.ln1.bias", zeros(n_embd)),
            (f"{b}.attn_q.weight", rand(n_embd, n_embd, std=proj)), (f"{b}.attn_q.bias", zeros(n_embd)),
            (f"{b}.attn_k.weight", rand(n_embd, n_embd, std=proj)),
            (f"{b}.attn_v.weight", rand(n_embd, n_embd, std=proj)), (f"{b}.attn_v.bias", zeros(n_embd)),
            (f"{b}.attn_out.weight", rand(n_embd, n_embd, std=proj)), (f"{b}.attn_out.bias", zeros(n_embd)),
            (f"{b}.ln2.weight", ones(n_embd)), (f"{b}.ln2.bias", zeros(n_embd)),
            (f"{b}.ffn_up.weight", rand(n_ff, n_embd, std=proj)), (f"{b}.ffn_up.bias", zeros(n_ff)),
            (f"{b}.ffn_down.weight", rand(n_embd, n_ff, std=1.0 / np.sqrt(n_ff))), (f"{b}.ffn_down.bias", zeros(n_embd)),
        ]
    stacked = n_embd * stack_factor
    tensors += [
        ("a.post_ln.weight", ones(n_embd)), ("a.post_ln.bias", zeros(n_embd)),
        ("mm.a.norm_pre.weight", ones(stacked)),
        ("mm.a.mlp.1.weight", rand(2 * hidden, stacked, std=1.0 / np.sqrt(stacked))),
        ("mm.a.norm_mid.weight", ones(hidden)),
        # the projector's output lands where token embeddings do: of about their scale (std 1)
        ("mm.a.mlp.2.weight", rand(n_embd_text, hidden, std=2.0 / np.sqrt(hidden))),
    ]
    return tensors


def _audio_meta(*, n_embd_text: int, n_embd: int, n_head: int, n_ff: int, n_layer: int, n_mel: int,
                stack_factor: int) -> dict[str, Any]:
    return {
        "clip.has_audio_encoder": True,
        "clip.audio.embedding_length": n_embd, "clip.audio.attention.head_count": n_head,
        "clip.audio.feed_forward_length": n_ff, "clip.audio.block_count": n_layer,
        "clip.audio.projection_dim": n_embd_text, "clip.audio.attention.layer_norm_epsilon": 1e-5,
        "clip.audio.num_mel_bins": n_mel, "clip.audio.projector.stack_factor": stack_factor,
    }


def write_tiny_audio_mmproj(path: str | os.PathLike[str], *, n_embd_text: int = 64, n_embd: int = 32,
                            n_head: int = 2, n_ff: int = 48, n_layer: int = 2, n_mel: int = 80,
                            stack_factor: int = 16, hidden: int = 64, seed: int = 0) -> Path:
    """Write a tiny ``ultravox`` audio projector for a text model ``n_embd_text`` wide: each
    30-second window of a clip is audio_tokens(stack_factor) positions (94 by default)."""
    rng = np.random.default_rng(seed)
    meta = {"general.name": "tiny-random-audio-mmproj", "general.file_type": 0,
            "clip.has_vision_encoder": False, "clip.projector_type": "ultravox",
            **_audio_meta(n_embd_text=n_embd_text, n_embd=n_embd, n_head=n_head, n_ff=n_ff, n_layer=n_layer,
                          n_mel=n_mel, stack_factor=stack_factor)}
    tensors = _audio_tensors(rng, n_embd_text=n_embd_text, n_embd=n_embd, n_ff=n_ff, n_layer=n_layer, n_mel=n_mel,
                             stack_factor=stack_factor, hidden=hidden)
    write_gguf(path, "clip", meta, tensors)
    return Path(path)


def write_tiny_av_mmproj(path: str | os.PathLike[str], *, n_embd_text: int = 64, seed: int = 0) -> Path:
    """One projector with both encoders: tinyvision's ``mlp`` vision tower and the ``ultravox``
    audio one above (each under its own ``clip.<modality>.projector_type``, as mixed
    projectors such as Qwen2.5-Omni's are written)."""
    from gguf import GGUFReader          # the vision half is read back from tinyvision's own file

    vision = Path(str(path) + ".vision")
    write_tiny_mmproj(vision, n_embd_text=n_embd_text, seed=seed)
    reader = GGUFReader(str(vision))
    meta: dict[str, Any] = {}
    for key, fld in reader.fields.items():
        if key.startswith("clip.vision.") or key == "clip.use_gelu":
            meta[key] = fld.contents()
    vision_tensors = [(t.name, np.array(t.data).reshape(tuple(reversed([int(d) for d in t.shape]))))
                      for t in reader.tensors]
    del reader
    vision.unlink()
    meta.update({"general.name": "tiny-random-av-mmproj", "general.file_type": 0,
                 "clip.has_vision_encoder": True, "clip.vision.projector_type": "mlp",
                 "clip.audio.projector_type": "ultravox",
                 **_audio_meta(n_embd_text=n_embd_text, n_embd=32, n_head=2, n_ff=48, n_layer=2, n_mel=80,
                               stack_factor=16)})
    tensors = vision_tensors + _audio_tensors(np.random.default_rng(seed + 1), n_embd_text=n_embd_text, n_embd=32,
                                              n_ff=48, n_layer=2, n_mel=80, stack_factor=16, hidden=64)
    write_gguf(path, "clip", meta, tensors)
    return Path(path)


# ---- audio, made with the standard library -------------------------------------------

def tone(seconds: float, *, freq: float = 440.0, rate: int = SAMPLE_RATE, amplitude: float = 0.5,
         glide: float = 0.0) -> list[float]:
    """Samples in [-1, 1] of a sine at `freq` Hz (rising `glide` Hz a second: a speech-like
    sweep), `seconds` long."""
    n = int(round(seconds * rate))
    return [amplitude * math.sin(2 * math.pi * (freq + glide * i / rate / 2) * i / rate) for i in range(n)]


def wav_bytes(samples: list[float], *, rate: int = SAMPLE_RATE, channels: int = 1, bits: int = 16) -> bytes:
    """A PCM WAV of these samples (interleaved when channels > 1): 8-bit unsigned, 16- or 32-bit
    integers, or with bits=-32 32-bit floats (format 3, written by hand: the wave module
    writes integer PCM only)."""
    if bits == -32:
        data = struct.pack(f"<{len(samples)}f", *samples)
        fmt = struct.pack("<HHIIHH", 3, channels, rate, rate * channels * 4, channels * 4, 32)
        body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
        return b"RIFF" + struct.pack("<I", len(body)) + body
    width = bits // 8
    if bits == 8:
        data = bytes(max(0, min(255, int(round(s * 127)) + 128)) for s in samples)
    else:
        top = (1 << (bits - 1)) - 1
        data = struct.pack(f"<{len(samples)}{'h' if bits == 16 else 'i'}",
                           *(max(-top - 1, min(top, int(round(s * top)))) for s in samples))
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(width)
        w.setframerate(rate)
        w.writeframes(data)
    return out.getvalue()


def mp3_bytes(samples: list[float], *, rate: int = SAMPLE_RATE, kbps: int = 64) -> bytes:
    """A mono MP3 of these samples, encoded by LAME (the ``lameenc`` wheel): bare frames, no
    ID3 or Xing tag."""
    import lameenc

    encoder = lameenc.Encoder()
    encoder.set_bit_rate(kbps)
    encoder.set_in_sample_rate(rate)
    encoder.set_channels(1)
    encoder.set_quality(2)
    pcm = struct.pack(f"<{len(samples)}h", *(max(-32768, min(32767, int(round(s * 32767)))) for s in samples))
    return bytes(encoder.encode(pcm) + encoder.flush())


def with_xing(mp3: bytes, frames: int) -> bytes:
    """The MP3 with a Xing tag declaring `frames` frames written into its first frame, where
    dr_mp3 reads one (after the 4-byte header and the side information: 9 bytes for MPEG-2 mono,
    17 for MPEG-1 mono or MPEG-2 stereo, 32 for MPEG-1 stereo)."""
    mpeg1, mono = (mp3[1] >> 3) & 3 == 3, mp3[3] >> 6 == 3
    at = 4 + ((17 if mono else 32) if mpeg1 else (9 if mono else 17))
    tag = b"Xing" + struct.pack(">II", 1, frames)
    return mp3[:at] + tag + mp3[at + len(tag):]


def _crc8(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x8005) & 0xFFFF if crc & 0x8000 else (crc << 1) & 0xFFFF
    return crc


def flac_bytes(samples: list[float], *, rate: int = SAMPLE_RATE, block: int = 4096,
               declared: int | None = None) -> bytes:
    """A mono 16-bit FLAC of these samples, every frame's subframe VERBATIM (no prediction: the
    format at its simplest). declared: the STREAMINFO sample count (default: the true one; 0
    says unknown)."""
    pcm = [max(-32768, min(32767, int(round(s * 32767)))) for s in samples]
    total = len(pcm) if declared is None else declared
    info = struct.pack(">HH", block, block) + b"\x00" * 6
    info += ((rate << 44) | (0 << 41) | (15 << 36) | total).to_bytes(8, "big") + b"\x00" * 16
    out = b"fLaC" + bytes([0x80, 0, 0, 34]) + info
    for number, start in enumerate(range(0, len(pcm), block)):
        chunk = pcm[start:start + block]
        coded = bytes([number]) if number < 0x80 else bytes([0xC0 | number >> 6, 0x80 | number & 0x3F])
        head = bytes([0xFF, 0xF8, 0x70, 0x08]) + coded + struct.pack(">H", len(chunk) - 1)
        head += bytes([_crc8(head)])
        frame = head + b"\x02" + struct.pack(f">{len(chunk)}h", *chunk)
        out += frame + struct.pack(">H", _crc16(frame))
    return out


def silent_mp3_frames(seconds: float) -> bytes:
    """MPEG-2.5 Layer III mono frames at 8 kHz and 8 kbps (72 bytes, 72 ms each) of silence: the
    most audio dr_mp3 decodes from a byte, found by it anywhere in the bytes it is handed."""
    frame = bytes([0xFF, 0xE3, 0x18, 0xC0]) + bytes(68)
    return frame * math.ceil(seconds / 0.072)


def flac_with_blocks(flac: bytes, blocks: list[tuple[int, bytes]], *, tail: bytes | None = None) -> bytes:
    """The FLAC (flac_bytes: STREAMINFO alone, then its frames) with metadata `blocks` (type,
    body) after STREAMINFO, the last one flagged last; `tail` in place of the frames (say two
    stray bytes) leaves no block flagged last, a chain dr_flac cannot open."""
    head = b"fLaC" + bytes([0x00 if blocks else 0x80]) + flac[5:42]
    for i, (kind, body) in enumerate(blocks):
        last = i == len(blocks) - 1 and tail is None
        head += bytes([kind | (0x80 if last else 0)]) + len(body).to_bytes(3, "big") + body
    return head + (flac[42:] if tail is None else tail)


def mp3_hiding_frames(size: int, salt: int = 0) -> bytes:
    """About `size` bytes of MP3 whose frames walk as a twentieth of what dr_mp3 decodes: long
    frames (MPEG-2.5 at 8 kHz and MPEG-2 at 16 kHz in turn, which dr_mp3 does not chain) with a
    chain of 8 kbps frames in their data, 36 bytes off, which it follows (200 KB walk as 10 s and
    decode to 200 s). `salt` makes another clip of the same length."""
    data = bytearray(size)
    for at in range(36, size - 72, 72):
        data[at:at + 4] = bytes([0xFF, 0xE3, 0x18, 0xC0])
    at, turn = 0, 0
    while at + 1440 <= size:
        data[at:at + 4] = bytes([0xFF, 0xE3 if turn == 0 else 0xF3, 0xE8, 0xC0])
        at, turn = at + (1440 if turn == 0 else 720), turn ^ 1
    data[100] = salt & 0xFF
    return bytes(data[:at])
