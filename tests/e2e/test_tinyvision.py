"""The tiny vision projector of tests/support/tinyvision.py runs in the real libmtmd.

Straight through llama-cpp-python's bindings (llama_cpp.mtmd_cpp), no localserve code: the
projector loads beside a tiny text model, the stdlib-made PNG and BMP decode through
libmtmd's own loader, a prompt with media markers tokenizes into text and image chunks, an
image encodes into embeddings as wide as the text model's, and those embeddings reach the
logits (two pictures differ, the same picture twice does not).
"""

from __future__ import annotations

import ctypes
import math

import llama_cpp as L
import llama_cpp.mtmd_cpp as M
import pytest

from tinymodel import CHATML_TEMPLATE, write_tiny_gguf  # tests/support/
from tinyvision import IMAGE_TOKENS, bmp_bytes, checkerboard, png_bytes, solid, write_tiny_mmproj

TEXT = 0
IMAGE = 1


@L.llama_log_callback
def _quiet_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    pass


@pytest.fixture(autouse=True, scope="module")
def _silence_logs():
    L.llama_log_set(_quiet_log, ctypes.c_void_p(0))
    M.mtmd_log_set(_quiet_log, ctypes.c_void_p(0))
    M.mtmd_helper_log_set(_quiet_log, ctypes.c_void_p(0))
    yield
    from llama_cpp import _logger

    L.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


class Vision:
    """A tiny text model, its context and the projector loaded by mtmd_init_from_file."""

    def __init__(self, tmp_path, n_embd_text: int = 64):
        model = write_tiny_gguf(tmp_path / "tiny.gguf", chat_template=CHATML_TEMPLATE)
        proj = write_tiny_mmproj(tmp_path / "mmproj-tiny.gguf", n_embd_text=n_embd_text)
        self.model = L.llama_model_load_from_file(str(model).encode(), L.llama_model_default_params())
        params = L.llama_context_default_params()
        params.n_ctx, params.n_batch = 512, 512
        self.ctx = L.llama_init_from_model(self.model, params)
        mparams = M.mtmd_context_params_default()
        mparams.use_gpu, mparams.n_threads, mparams.print_timings = False, 1, False
        self.mtmd = M.mtmd_init_from_file(str(proj).encode(), self.model, mparams)

    def close(self) -> None:
        if self.mtmd:
            M.mtmd_free(self.mtmd)
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

    def bitmap(self, data: bytes):
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        return M.mtmd_helper_bitmap_init_from_buf(self.mtmd, buf, len(data), False)

    def tokenize(self, prompt: str, images: list[bytes]):
        bitmaps = [self.bitmap(data) for data in images]
        assert all(bitmaps)
        text = M.mtmd_input_text()
        text.text = prompt.encode()
        text.text_len = len(text.text)
        text.add_special, text.parse_special = True, True
        chunks = M.mtmd_input_chunks_init()
        array = (M.mtmd_bitmap_p_ctypes * len(bitmaps))(*bitmaps)
        assert M.mtmd_tokenize(self.mtmd, chunks, ctypes.byref(text), array, len(bitmaps)) == 0
        for bitmap in bitmaps:
            M.mtmd_bitmap_free(bitmap)
        return chunks

    def last_logits(self, prompt: str, images: list[bytes]) -> list[float]:
        chunks = self.tokenize(prompt, images)
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        n_past = L.llama_pos(0)
        rc = M.mtmd_helper_eval_chunks(self.mtmd, self.ctx, chunks, 0, 0, 512, True, ctypes.byref(n_past))
        M.mtmd_input_chunks_free(chunks)
        assert rc == 0
        row = L.llama_get_logits_ith(self.ctx, -1)
        return [row[i] for i in range(L.llama_vocab_n_tokens(L.llama_model_get_vocab(self.model)))]


@pytest.fixture
def vision(tmp_path):
    v = Vision(tmp_path)
    assert v.mtmd, "libmtmd refused the tiny projector"
    yield v
    v.close()


MARKER = M.mtmd_default_marker().decode()
PROMPT = f"<|im_start|>user\nHello {MARKER} world<|im_end|>\n<|im_start|>assistant\n"
PNG = png_bytes(checkerboard(20, 12))
OTHER_PNG = png_bytes(solid(20, 12, (200, 30, 30)))


def test_the_projector_loads_with_vision_and_no_mrope(vision):
    assert M.mtmd_support_vision(vision.mtmd)
    assert not M.mtmd_support_audio(vision.mtmd)
    assert not M.mtmd_decode_use_mrope(vision.mtmd)


def test_stdlib_png_and_bmp_decode_through_libmtmd(vision):
    for data, size in ((png_bytes(checkerboard(20, 12)), (20, 12)), (bmp_bytes(solid(7, 5, (1, 2, 3))), (7, 5))):
        bitmap = vision.bitmap(data)
        assert bitmap, data[:4]
        assert (M.mtmd_bitmap_get_nx(bitmap), M.mtmd_bitmap_get_ny(bitmap)) == size
        assert M.mtmd_bitmap_get_n_bytes(bitmap) == size[0] * size[1] * 3
        M.mtmd_bitmap_free(bitmap)


def test_bytes_that_are_no_image_give_no_bitmap(vision):
    assert not vision.bitmap(b"this is not an image at all")
    assert not vision.bitmap(PNG[: len(PNG) // 2])


def test_a_marker_becomes_one_image_chunk_that_encodes_to_model_width_embeddings(vision):
    chunks = vision.tokenize(PROMPT, [PNG])
    kinds = [M.mtmd_input_chunk_get_type(M.mtmd_input_chunks_get(chunks, i))
             for i in range(M.mtmd_input_chunks_size(chunks))]
    assert kinds == [TEXT, IMAGE, TEXT]
    image = M.mtmd_input_chunks_get(chunks, 1)
    assert M.mtmd_input_chunk_get_n_tokens(image) == IMAGE_TOKENS
    assert M.mtmd_input_chunk_get_n_pos(image) == IMAGE_TOKENS
    assert M.mtmd_encode_chunk(vision.mtmd, image) == 0
    embd = M.mtmd_get_output_embd(vision.mtmd)
    values = [embd[i] for i in range(IMAGE_TOKENS * 64)]
    assert all(math.isfinite(v) for v in values)
    assert max(values) - min(values) > 0.5  # not a constant: the weights reach the output
    M.mtmd_input_chunks_free(chunks)


def test_the_picture_reaches_the_logits(vision):
    first = vision.last_logits(PROMPT, [PNG])
    again = vision.last_logits(PROMPT, [PNG])
    other = vision.last_logits(PROMPT, [OTHER_PNG])
    assert first == again
    assert max(abs(a - b) for a, b in zip(first, other)) > 1e-3


def test_a_projector_of_another_width_is_refused(tmp_path):
    v = Vision(tmp_path, n_embd_text=32)
    try:
        assert not v.mtmd
    finally:
        v.close()
