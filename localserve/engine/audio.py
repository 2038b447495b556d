"""A clip through the projector's audio encoder (libmtmd), off the runtime thread (a request's decode thread).

The bytes come checked by localserve/audio.py (a WAV rewritten there, or an MP3 / FLAC stream
whose declared length was held to the limit). libmtmd's helper decodes them with miniaudio,
mixed to mono and resampled to the encoder's rate (16 kHz for the Whisper family); then, before
mtmd_tokenize sees the samples, the decoded length is checked again, since mtmd_tokenize asserts
on shapes it does not expect (a clip of one sample: ``GGML_ASSERT(buf.size() > sizeof(float))``,
which ends the whole process). mtmd_tokenize cuts the clip into the encoder's windows (30 s of
log-mel frames for Whisper's), one audio chunk each, with the tokens its model wraps a clip in
(Qwen2-Audio's <|audio_bos|> ... <|audio_eos|>); a cut in the prompt cache never falls inside
one, as none falls inside an image. The runtime evaluates them as it does images
(runtime/images.py): encoded once, decoded in parts between steps.

The decode and the log-mel take a while for a long clip (a second or more for five minutes), so
a caller runs them off the connection thread (dialects/media_wait.py) and hands in `stop`: a
client that left sets it, and the work stops between its steps (before the decode, before the
log-mel), with DecodeStopped.

The projector (vision.Projector) is handed in: this module reads its context and sample rate
and gets its segments back through Projector.segments_of, and imports nothing of vision.py.
"""

from __future__ import annotations

import ctypes
import math
import threading
from typing import Protocol

from llama_cpp import mtmd_cpp as mtmd

from ..audio import MAX_AUDIO_SECONDS
from .facade import AudioUnreadable, DecodeStopped, ImageUnreadable, stop_if

CHUNK_AUDIO = 2
# Clips decoded at once, all models together: each holds up to MAX_AUDIO_SECONDS of float
# samples twice over (miniaudio's buffer, libmtmd's copy) and its log-mel frames.
MAX_CONCURRENT_AUDIO_DECODES = 2
_decoding = threading.BoundedSemaphore(MAX_CONCURRENT_AUDIO_DECODES)
# The shortest clip every encoder's front end takes: mtmd_tokenize asserts more than one float's
# bytes, and the conformer log-mel (LFM2-Audio) at least two hops (20 ms at 16 kHz) with
# GGML_ASSERT(effective_n_len > 1); either ends the process. Twice that, for the hops of others.
MIN_CLIP_SECONDS = 0.04
SLACK_SECONDS = 1.0              # resampling and an MP3's estimated length may differ this much
# Encoders that stack a Whisper window's frames with no pooling after (clip-model.h's
# audio_has_stack_frames without audio_has_avgpool), and that window's log-mel frames
STACKING_TYPES = ("ultravox", "meralion")
WINDOW_FRAMES = 3000


class _Projector(Protocol):
    ctx: int
    audio: bool
    sample_rate: int

    def segments_of(self, bitmap: int, kind: int) -> list: ...


def audio_segments(projector: _Projector, data: bytes, stop: threading.Event | None = None) -> list:
    """The clip's prompt segments: token lists and its audio chunks (vision.MediaChunk);
    DecodeStopped where `stop` was set before the decode or before the log-mel."""
    if not projector.audio:
        raise AudioUnreadable("this model's projector has no audio encoder")
    with _decoding:
        stop_if(stop, "before its decode")
        bitmap = _bitmap(projector, data)
        try:
            _check_decoded(mtmd.mtmd_bitmap_get_nx(bitmap), projector.sample_rate, MAX_AUDIO_SECONDS)
            stop_if(stop, "after its decode, before its log-mel")
        except (AudioUnreadable, DecodeStopped):
            mtmd.mtmd_bitmap_free(bitmap)
            raise
        try:
            return projector.segments_of(bitmap, CHUNK_AUDIO)
        except ImageUnreadable as exc:
            raise AudioUnreadable(str(exc).replace("the image", "the clip")) from None


def stacking_refusal(meta: dict) -> str | None:
    """Why a projector's audio encoder cannot be served, or None. libmtmd counts a window's
    positions as ceil(3000 / s) // 2 (clip.cpp, clip_n_output_tokens) while the graph makes
    ceil(1500 / s) (build_stack pads the 1,500 positions the convolutions leave): where the two
    differ (a stack factor s of 7 or 8) the first clip aborts the process ("Invalid number of
    output tokens"), so such a projector is refused at load."""
    kind = meta.get("clip.audio.projector_type", meta.get("clip.projector_type"))
    factor = meta.get("clip.audio.projector.stack_factor")
    if kind not in STACKING_TYPES or not isinstance(factor, int) or factor <= 1:
        return None
    counted, made = -(-WINDOW_FRAMES // factor) // 2, -(-(WINDOW_FRAMES // 2) // factor)
    if counted == made:
        return None
    return (f"its {kind} audio encoder stacks {factor} frames, which libmtmd counts as {counted} positions a "
            f"window while its graph makes {made}: the first clip would abort the process")


def _bitmap(projector: _Projector, data: bytes) -> int:
    if not data.startswith((b"RIFF", b"fLaC", b"\xff")):
        # the helper sniffs the same magic bytes; anything else it would hand to stb as an image
        raise AudioUnreadable("the bytes are no WAV, MP3 or FLAC stream audio.py checked")
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(projector.ctx, buf, len(data), False)
    if not bitmap:
        raise AudioUnreadable("libmtmd could not decode the audio")
    if not mtmd.mtmd_bitmap_is_audio(bitmap):
        mtmd.mtmd_bitmap_free(bitmap)
        raise AudioUnreadable("libmtmd read the data as an image, not audio")
    return bitmap


def shortest_clip(rate: int) -> int:
    """The fewest decoded samples a clip may have at `rate`: MIN_CLIP_SECONDS of them, and never one."""
    return max(2, math.ceil(MIN_CLIP_SECONDS * rate))


def _check_decoded(n_samples: int, rate: int, max_seconds: float) -> None:
    shortest = shortest_clip(rate)
    if n_samples < shortest:
        raise AudioUnreadable(f"the clip decodes to {n_samples} sample(s) at {rate} Hz; at least {shortest} "
                              f"(MIN_CLIP_SECONDS: {MIN_CLIP_SECONDS:g}) are needed", "audio_too_short")
    seconds = n_samples / rate
    if seconds > max_seconds + SLACK_SECONDS:
        raise AudioUnreadable(f"the clip decodes to {seconds:.1f} seconds, more than MAX_AUDIO_SECONDS "
                              f"({max_seconds:g}) allows", "audio_too_long")
