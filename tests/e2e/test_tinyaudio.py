"""The tiny audio projector of tests/support/tinyaudio.py runs in the real libmtmd.

Straight through llama-cpp-python's bindings and bench/bare_vision.py's loop (libmtmd's own
calls, no localserve code): the projector loads beside a tiny text model with the audio
capability (and with vision too, in the file with both encoders), a stdlib-made WAV decodes
through libmtmd's own decoder at the encoder's rate, a clip up to 30 s is one audio chunk of
audio_tokens() positions and a longer one a chunk per 30-second window, the embeddings are as
wide as the text model's and reach the logits (two clips differ, the same clip twice does not).
"""

from __future__ import annotations

import ctypes

import llama_cpp.mtmd_cpp as M
import numpy as np
import pytest

from bench.bare_vision import BareVision
from tinymodel import CHATML_TEMPLATE, write_tiny_gguf  # tests/support/
from tinyaudio import SAMPLE_RATE, audio_tokens, tone, wav_bytes, write_tiny_audio_mmproj, write_tiny_av_mmproj

TEXT, IMAGE, AUDIO = 0, 1, 2
MARKER = M.mtmd_default_marker().decode()
PROMPT = f"<|im_start|>user\nListen: {MARKER} what is it?<|im_end|>\n<|im_start|>assistant\n"
CLIP = wav_bytes(tone(1.0))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tinyaudio")
    return {"model": str(write_tiny_gguf(d / "tiny.gguf", chat_template=CHATML_TEMPLATE)),
            "audio": str(write_tiny_audio_mmproj(d / "mmproj-audio.gguf")),
            "both": str(write_tiny_av_mmproj(d / "mmproj-av.gguf")),
            "narrow": str(write_tiny_audio_mmproj(d / "mmproj-narrow.gguf", n_embd_text=32))}


@pytest.fixture(scope="module")
def bare(files):
    b = BareVision(files["model"], files["audio"], n_ctx=1024)
    yield b
    b.close()


def chunk_kinds(bare: BareVision, prompt: str, clip: bytes) -> list[tuple[int, int]]:
    buf = (ctypes.c_uint8 * len(clip)).from_buffer_copy(clip)
    bitmap = M.mtmd_helper_bitmap_init_from_buf(bare.mtmd, buf, len(clip), False)
    assert bitmap and M.mtmd_bitmap_is_audio(bitmap)
    text = M.mtmd_input_text()
    text.text = prompt.encode()
    text.text_len = len(text.text)
    text.add_special, text.parse_special = True, True
    chunks = M.mtmd_input_chunks_init()
    try:
        assert M.mtmd_tokenize(bare.mtmd, chunks, ctypes.byref(text), (M.mtmd_bitmap_p_ctypes * 1)(bitmap), 1) == 0
        found = []
        for i in range(M.mtmd_input_chunks_size(chunks)):
            chunk = M.mtmd_input_chunks_get(chunks, i)
            found.append((M.mtmd_input_chunk_get_type(chunk), M.mtmd_input_chunk_get_n_tokens(chunk)))
        return found
    finally:
        M.mtmd_input_chunks_free(chunks)
        M.mtmd_bitmap_free(bitmap)


def test_the_projector_loads_with_audio_alone(bare):
    assert M.mtmd_support_audio(bare.mtmd)
    assert not M.mtmd_support_vision(bare.mtmd)
    assert M.mtmd_get_audio_sample_rate(bare.mtmd) == SAMPLE_RATE
    assert not M.mtmd_decode_use_mrope(bare.mtmd)


def test_a_projector_with_both_encoders_serves_both(files):
    b = BareVision(files["model"], files["both"], n_ctx=1024)
    try:
        assert M.mtmd_support_audio(b.mtmd) and M.mtmd_support_vision(b.mtmd)
        assert b.prefill(PROMPT, [CLIP])[0] > audio_tokens()
    finally:
        b.close()


def test_a_clip_is_one_audio_chunk_per_30_second_window(bare):
    kinds = chunk_kinds(bare, PROMPT, CLIP)
    assert [k for k, _ in kinds] == [TEXT, AUDIO, TEXT]
    assert kinds[1][1] == audio_tokens() == 94
    longer = chunk_kinds(bare, PROMPT, wav_bytes(tone(31.0, freq=300)))
    assert [k for k, _ in longer] == [TEXT, AUDIO, AUDIO, TEXT]


def test_wav_formats_decode_at_the_encoders_rate(bare):
    for clip in (wav_bytes(tone(0.5, rate=8000), rate=8000), wav_bytes(tone(0.5) * 2, channels=2),
                 wav_bytes(tone(0.5), bits=8), wav_bytes(tone(0.5), bits=32), wav_bytes(tone(0.5), bits=-32),
                 wav_bytes(tone(0.5, rate=44100), rate=44100)):
        buf = (ctypes.c_uint8 * len(clip)).from_buffer_copy(clip)
        bitmap = M.mtmd_helper_bitmap_init_from_buf(bare.mtmd, buf, len(clip), False)
        assert bitmap and M.mtmd_bitmap_is_audio(bitmap)
        assert abs(M.mtmd_bitmap_get_nx(bitmap) - SAMPLE_RATE // 2) <= 2
        M.mtmd_bitmap_free(bitmap)


def test_the_clip_reaches_the_logits(bare):
    def logits(clip: bytes) -> np.ndarray:
        bare.prefill(PROMPT, [clip])
        return bare.logits()

    first, again, other = logits(CLIP), logits(CLIP), logits(wav_bytes(tone(1.0, freq=200, glide=400)))
    assert np.array_equal(first, again)
    assert np.abs(first - other).max() > 1e-2
    assert np.all(np.isfinite(first))


def test_a_projector_of_another_width_is_refused(files):
    with pytest.raises(RuntimeError):
        BareVision(files["model"], files["narrow"], n_ctx=1024)
