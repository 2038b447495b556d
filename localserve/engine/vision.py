"""A model's vision projector (an mmproj GGUF) through llama.cpp's libmtmd.

The projector loads beside its text model, as part of that model's load, on the same devices
(--n-gpu-layers 0 keeps it on the CPU). Two sides, as the engine has:

- connection threads turn one image's bytes into prompt segments (image_segments): libmtmd
  decodes the picture (PNG, JPEG, GIF, BMP ... through its own loader), preprocesses it and
  returns the tokens the model wraps an image in (Gemma 3's <start_of_image> ...) around one
  image chunk. That reads the projector's fixed settings and the vocabulary, never the
  llama context, so it is safe off the runtime thread;
- the runtime thread evaluates an image chunk into a sequence (evaluate): the encoder's
  output decoded into the sequence's KV at its positions, between two decode steps.

The prompt carries the chunk as an opaque MediaChunk (generation.ImageChunk.handle); freeing
it is Python's business (a finalizer), never the request's.
"""

from __future__ import annotations

import ctypes
import time
import weakref
from dataclasses import dataclass, field

from llama_cpp import llama_cpp as ll
from llama_cpp import mtmd_cpp as mtmd

from ..generation import MEDIA_MARKER
from . import model_load
from .facade import ImageUnreadable
from .model_load import ModelLoadError

CHUNK_TEXT = 0
CHUNK_IMAGE = 1


@dataclass(eq=False)
class MediaChunk:
    """One image chunk of libmtmd (a copy this object owns): its token count and positions."""
    pointer: int
    n_tokens: int
    n_pos: int
    _free: weakref.finalize = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._free = weakref.finalize(self, mtmd.mtmd_input_chunk_free, ctypes.c_void_p(self.pointer))


class Projector:
    """The loaded projector of one model."""

    def __init__(self, path: str, model: int, *, threads: int, use_gpu: bool):
        model_load.check_model_file(path)
        model_load.route_mtmd_logs(mtmd)
        params = mtmd.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = threads
        params.print_timings = False
        params.warmup = True
        self._marker = MEDIA_MARKER.encode()
        params.media_marker = self._marker        # referenced for the context's life
        model_load.recent_native_errors.clear()
        self.ctx = mtmd.mtmd_init_from_file(path.encode(), model, params)
        if not self.ctx:
            raise ModelLoadError(f"libmtmd could not load the vision projector {path}: {model_load.native_reason()}")
        self.path = path
        if not mtmd.mtmd_support_vision(self.ctx):
            self.close()
            raise ModelLoadError(f"{path} is a projector without vision (audio only?): not served")
        # M-RoPE (the Qwen2-VL family) needs nothing here: an image of w x h tokens says it takes
        # max(w, h) positions (MediaChunk.n_pos), and the runtime places what follows accordingly

    def close(self) -> None:
        if self.ctx:
            mtmd.mtmd_free(self.ctx)
            self.ctx = None

    # ---- connection threads ----------------------------------------------------------

    def image_segments(self, data: bytes) -> list[list[int] | MediaChunk]:
        """One image as prompt segments, in order: token lists (the model's own wrapping) and its
        image chunk. ImageUnreadable when libmtmd cannot decode the bytes."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.ctx, buf, len(data), False)
        if not bitmap:
            raise ImageUnreadable("libmtmd could not decode the image")
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            text = mtmd.mtmd_input_text()
            text.text = self._marker
            text.text_len = len(self._marker)
            text.add_special, text.parse_special = False, True
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            status = mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), bitmaps, 1)
            if status != 0:
                raise ImageUnreadable(f"libmtmd could not prepare the image (status {status})")
            return [segment for i in range(mtmd.mtmd_input_chunks_size(chunks))
                    if (segment := self._segment(mtmd.mtmd_input_chunks_get(chunks, i)))]
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)

    def _segment(self, chunk: int) -> list[int] | MediaChunk:
        kind = mtmd.mtmd_input_chunk_get_type(chunk)
        if kind == CHUNK_TEXT:
            n = ctypes.c_size_t(0)
            tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            return [tokens[i] for i in range(n.value)]
        if kind != CHUNK_IMAGE:
            raise ImageUnreadable("libmtmd read the data as audio, not an image")
        n_tokens, n_pos = mtmd.mtmd_input_chunk_get_n_tokens(chunk), mtmd.mtmd_input_chunk_get_n_pos(chunk)
        copy = mtmd.mtmd_input_chunk_copy(chunk)
        if not copy:
            raise ImageUnreadable("libmtmd could not keep the image's chunk")
        return MediaChunk(copy, n_tokens, n_pos)

    # ---- the runtime thread ------------------------------------------------------------

    def evaluate(self, llama_ctx: int, chunk: MediaChunk, n_past: int, seq_id: int, n_batch: int) -> float:
        """Encode the image and decode its embeddings into `seq_id` from position `n_past`; the
        seconds it took. RuntimeError when libmtmd fails."""
        started = time.perf_counter()
        new_n_past = ll.llama_pos(n_past)
        status = mtmd.mtmd_helper_eval_chunk_single(self.ctx, llama_ctx, ctypes.c_void_p(chunk.pointer), n_past,
                                                    seq_id, n_batch, False, ctypes.byref(new_n_past))
        if status != 0:
            raise RuntimeError(f"libmtmd failed to evaluate an image (status {status})")
        return time.perf_counter() - started
