"""A model's vision projector (an mmproj GGUF) through llama.cpp's libmtmd.

The projector loads beside its text model, as part of that model's load, on the same devices
(--n-gpu-layers 0 keeps it on the CPU). Two sides, as the engine has:

- a request's decode thread (dialects/media_wait.py, beside its connection thread) turns one
  image's bytes into prompt segments (image_segments): libmtmd decodes the picture (PNG, JPEG,
  GIF or BMP, through stb_image), preprocesses it and returns the tokens the model wraps an
  image in (Gemma 3's <start_of_image> ...) around one image chunk. That reads the projector's
  fixed settings and the vocabulary, never the llama context, so it is safe off the runtime
  thread. A client that left sets the decode's `stop`, and the work stops between its steps
  (before stb's decode, before the preprocessing), as a clip's does. Only bytes images.py read as one of
  those four formats are handed over, and never with a way to start a program: libmtmd's
  helper falls back to audio for some magic bytes and, built with video, to ffprobe and ffmpeg
  for whatever stb cannot read; the build turns video off (MTMD_VIDEO=OFF) and the helper is
  given a directory for those tools that cannot exist. At most MAX_CONCURRENT_DECODES images
  are decoded at once, each within image_headers.MAX_DECODE_BYTES;
- the runtime thread evaluates an image chunk into a sequence, between two decode steps:
  whole (evaluate: libmtmd's helper, M-RoPE positions and both-ways attention included), or,
  where the model allows (causal attention, a position per token), encoded once (encode) and
  its embeddings decoded into the sequence part by part (decode_part), as a long prompt is
  fed in chunks, so the other streams keep stepping.

The prompt carries the chunk as an opaque MediaChunk (generation.ImageChunk.handle); freeing
it is Python's business (a finalizer), never the request's.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field

from llama_cpp import llama_cpp as ll
from llama_cpp import mtmd_cpp as mtmd

from ..generation import MEDIA_MARKER
from ..images import reaches_libmtmd
from . import model_load
from .audio import CHUNK_AUDIO, audio_segments, stacking_refusal
from .facade import DecodeStopped, ImageTooLargeForBatch, ImageUnreadable, stop_if
from .gguf_header import HeaderError, read_header
from .model_load import ModelLoadError

CHUNK_TEXT = 0
CHUNK_IMAGE = 1

# Images decoded at once, all models together: a decode is stb's and libmtmd's CPU work (the
# GIL released), so more than the CPUs only adds memory (each up to MAX_DECODE_BYTES).
MAX_CONCURRENT_DECODES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
_decoding = threading.BoundedSemaphore(MAX_CONCURRENT_DECODES)
# Where libmtmd's helper would look for ffprobe and ffmpeg, were it built with video: under
# /dev/null, which is no directory, so no program can be found there and none is started.
NO_PROGRAM_DIR = b"/dev/null/localserve-starts-no-programs"

log = logging.getLogger("localserve.engine")


@dataclass(eq=False)
class MediaChunk:
    """One image chunk of libmtmd (a copy this object owns): its token count and positions."""
    pointer: int
    n_tokens: int
    n_pos: int
    audio: bool = False     # an audio chunk: one window of a clip (engine/audio.py)
    _free: weakref.finalize = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._free = weakref.finalize(self, mtmd.mtmd_input_chunk_free, ctypes.c_void_p(self.pointer))


@dataclass(eq=False)
class EncodedImage:
    """An image's embeddings, copied out of libmtmd, while its parts are decoded step by step."""
    values: ctypes.Array
    n_tokens: int
    seconds: float          # spent on it so far: the encode and the parts decoded


def _check_audio_encoder(path: str) -> None:
    """A projector libmtmd loads but would abort on at its first clip is refused before it loads."""
    try:
        meta = read_header(path).meta
    except HeaderError:
        return                      # libmtmd's own load says what is wrong with the file
    refusal = stacking_refusal(meta)
    if refusal:
        raise ModelLoadError(f"the projector {path} is not served: {refusal}")


class Projector:
    """The loaded projector of one model, on that model's llama context."""

    def __init__(self, path: str, model: int, llama_ctx: int, *, n_batch: int, threads: int, use_gpu: bool):
        model_load.check_model_file(path)
        _check_audio_encoder(path)
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
        self.llama_ctx = llama_ctx
        self.n_embd = ll.llama_model_n_embd(model)
        self.n_batch = n_batch
        self._part_batch = None         # made when a first image is decoded in parts
        self.vision = bool(mtmd.mtmd_support_vision(self.ctx))
        self.audio = bool(mtmd.mtmd_support_audio(self.ctx))     # engine/audio.py reads clips through it
        self.sample_rate = mtmd.mtmd_get_audio_sample_rate(self.ctx) if self.audio else 0
        if not (self.vision or self.audio):
            self.close()
            raise ModelLoadError(f"{path} is a projector with neither a vision nor an audio encoder: not served")
        if mtmd.mtmd_helper_support_video(self.ctx):
            log.warning("this libmtmd was built with video (MTMD_VIDEO): images still never start a program "
                        "(only PNG, JPEG, GIF and BMP reach it, with no ffmpeg directory), but rebuild with "
                        "`make install`, which turns it off")
        # M-RoPE (the Qwen2-VL family) needs nothing here: an image of w x h tokens says it takes
        # max(w, h) positions (MediaChunk.n_pos), and the runtime places what follows accordingly

    def describe(self) -> str:
        """"vision projector PATH", "audio projector PATH" or "vision and audio projector PATH"."""
        kinds = " and ".join(kind for kind, has in (("vision", self.vision), ("audio", self.audio)) if has)
        return f"{kinds} projector {self.path}"

    def close(self) -> None:
        if self._part_batch is not None:
            ll.llama_batch_free(self._part_batch)
            self._part_batch = None
        if self.ctx:
            mtmd.mtmd_free(self.ctx)
            self.ctx = None

    # ---- connection threads ----------------------------------------------------------

    def image_segments(self, data: bytes, stop: threading.Event | None = None) -> list[list[int] | MediaChunk]:
        """One image as prompt segments, in order: token lists (the model's own wrapping) and its
        image chunk. ImageUnreadable when libmtmd cannot decode the bytes, or they are of no
        format images.py reads (they never reach libmtmd then); DecodeStopped where `stop` was
        set before stb's decode or before the preprocessing."""
        if not self.vision:
            raise ImageUnreadable("this model's projector has no vision encoder")
        if not reaches_libmtmd(data):
            raise ImageUnreadable("the bytes are no PNG, JPEG, GIF or BMP image")
        with _decoding:
            stop_if(stop, "before its decode")
            return self._decode(data, stop)

    def audio_segments(self, data: bytes, stop: threading.Event | None = None) -> list[list[int] | MediaChunk]:
        """One clip as prompt segments (engine/audio.py); AudioUnreadable, DecodeStopped."""
        return audio_segments(self, data, stop)

    def _decode(self, data: bytes, stop: threading.Event | None) -> list[list[int] | MediaChunk]:
        bitmap = self._bitmap(data)
        try:
            stop_if(stop, "after its decode, before its preprocessing")
        except DecodeStopped:
            mtmd.mtmd_bitmap_free(bitmap)
            raise
        return self.segments_of(bitmap, CHUNK_IMAGE)

    def segments_of(self, bitmap: int, kind: int) -> list[list[int] | MediaChunk]:
        """A bitmap (freed here) through mtmd_tokenize alone: its chunks, each of `kind` or text
        (engine/audio.py hands audio bitmaps here)."""
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
                    if (segment := self._segment(mtmd.mtmd_input_chunks_get(chunks, i), kind))]
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)

    def _bitmap(self, data: bytes) -> int:
        """stb's decode of the bytes into libmtmd's bitmap."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        options = mtmd.mtmd_helper_init_opt_default()
        options.video_params.ffmpeg_bin_dir = NO_PROGRAM_DIR
        made = mtmd.mtmd_helper_bitmap_init_from_buf_wrapper(self.ctx, buf, len(data), False, options)
        if made.video_ctx:          # cannot happen without a program to read it; never kept
            mtmd.mtmd_helper_video_free(made.video_ctx)
            if made.bitmap:
                mtmd.mtmd_bitmap_free(made.bitmap)
            raise ImageUnreadable("libmtmd read the data as a video, not an image")
        if not made.bitmap:
            raise ImageUnreadable("libmtmd could not decode the image")
        return made.bitmap

    def _segment(self, chunk: int, expected: int) -> list[int] | MediaChunk:
        kind = mtmd.mtmd_input_chunk_get_type(chunk)
        if kind == CHUNK_TEXT:
            n = ctypes.c_size_t(0)
            tokens = mtmd.mtmd_input_chunk_get_tokens_text(chunk, ctypes.byref(n))
            return [tokens[i] for i in range(n.value)]
        if kind != expected:
            raise ImageUnreadable("libmtmd read the data as audio, not an image" if kind == CHUNK_AUDIO
                                  else "libmtmd read the data as an image, not audio")
        n_tokens, n_pos = mtmd.mtmd_input_chunk_get_n_tokens(chunk), mtmd.mtmd_input_chunk_get_n_pos(chunk)
        if n_tokens > self.n_batch and mtmd.mtmd_decode_use_non_causal(self.ctx, chunk):
            # libmtmd would decode it in batches, each attending only to those before it and
            # itself: a silently different image from the one the model was trained to see
            raise ImageTooLargeForBatch(n_tokens, self.n_batch)
        copy = mtmd.mtmd_input_chunk_copy(chunk)
        if not copy:
            raise ImageUnreadable("libmtmd could not keep the image's chunk")
        return MediaChunk(copy, n_tokens, n_pos, audio=kind == CHUNK_AUDIO)

    def one_batch_image_tokens(self) -> int | None:
        """When the projector decodes each image in one batch (attention both ways): the tokens
        of a small blank picture, the fewest an image takes (every image's, for Gemma 3's
        fixed size); else None."""
        if not mtmd.mtmd_decode_use_non_causal(self.ctx, None):
            return None
        side = 8
        pixels = (ctypes.c_uint8 * (side * side * 3))()
        bitmap = mtmd.mtmd_bitmap_init(side, side, pixels)
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            text = mtmd.mtmd_input_text()
            text.text, text.text_len = self._marker, len(self._marker)
            text.add_special, text.parse_special = False, True
            if mtmd.mtmd_tokenize(self.ctx, chunks, ctypes.byref(text), (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap), 1):
                return None
            sizes = [mtmd.mtmd_input_chunk_get_n_tokens(mtmd.mtmd_input_chunks_get(chunks, i))
                     for i in range(mtmd.mtmd_input_chunks_size(chunks))
                     if mtmd.mtmd_input_chunk_get_type(mtmd.mtmd_input_chunks_get(chunks, i)) == CHUNK_IMAGE]
            return max(sizes, default=None)
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            mtmd.mtmd_bitmap_free(bitmap)

    # ---- the runtime thread ------------------------------------------------------------

    def evaluate(self, chunk: MediaChunk, position: int, seq_id: int) -> float:
        """Encode the image and decode its embeddings into `seq_id` from `position`, whole; the
        seconds it took. RuntimeError when libmtmd fails. An image that attends both ways is at
        most a batch (image_segments refuses a larger one), so libmtmd decodes it in one."""
        started = time.perf_counter()
        new_n_past = ll.llama_pos(position)
        status = mtmd.mtmd_helper_eval_chunk_single(self.ctx, self.llama_ctx, ctypes.c_void_p(chunk.pointer),
                                                    position, seq_id, self.n_batch, False, ctypes.byref(new_n_past))
        if status != 0:
            raise RuntimeError(f"libmtmd failed to evaluate an image (status {status})")
        return time.perf_counter() - started

    def splits(self, chunk: MediaChunk) -> bool:
        """Its embeddings may be decoded part by part: causal attention over them, a position each
        (not M-RoPE, not Gemma 3's both-ways attention over an image)."""
        pointer = ctypes.c_void_p(chunk.pointer)
        return (chunk.n_pos == chunk.n_tokens and not mtmd.mtmd_decode_use_mrope(self.ctx)
                and not mtmd.mtmd_decode_use_non_causal(self.ctx, pointer))

    def encode(self, chunk: MediaChunk) -> EncodedImage:
        """The image through the vision tower and projector; its embeddings kept for decode_part."""
        started = time.perf_counter()
        status = mtmd.mtmd_encode_chunk(self.ctx, ctypes.c_void_p(chunk.pointer))
        if status != 0:
            raise RuntimeError(f"libmtmd failed to encode an image (status {status})")
        n = chunk.n_tokens * self.n_embd
        values = (ctypes.c_float * n)()
        ctypes.memmove(values, mtmd.mtmd_get_output_embd(self.ctx), n * ctypes.sizeof(ctypes.c_float))
        return EncodedImage(values, chunk.n_tokens, time.perf_counter() - started)

    def decode_part(self, image: EncodedImage, start: int, count: int, position: int, seq_id: int) -> None:
        """Embeddings start..start+count of the image into `seq_id` from `position` (no logits)."""
        if count > self.n_batch:
            raise ValueError("a part is at most a batch")
        started = time.perf_counter()
        if self._part_batch is None:
            self._part_batch = ll.llama_batch_init(self.n_batch, self.n_embd, 1)
        batch = self._part_batch
        width = self.n_embd * ctypes.sizeof(ctypes.c_float)
        ctypes.memmove(batch.embd, ctypes.addressof(image.values) + start * width, count * width)
        for i in range(count):
            batch.pos[i] = position + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = seq_id
            batch.logits[i] = False
        batch.n_tokens = count
        status = ll.llama_decode(self.llama_ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed on an image's embeddings (status {status})")
        image.seconds += time.perf_counter() - started
