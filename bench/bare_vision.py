"""The floor for images: llama.cpp's and libmtmd's own calls on a prompt with images, nothing of
localserve. The tests compare the server's greedy tokens (and logprobs) with this; make bench
divides the server's encode-and-prefill time by it.

As llama-server does it: one mtmd_tokenize over the whole prompt text, its media markers
matched with the images' bitmaps (decoded by libmtmd's own loader), then
mtmd_helper_eval_chunks (each text chunk decoded, each image chunk encoded and its
embeddings decoded) with logits for the last token; then greedy decoding one token at a time.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np
from llama_cpp import llama_cpp as ll
from llama_cpp import mtmd_cpp as mtmd

_SILENT = ll.llama_log_callback(lambda *_: None)    # module-wide: llama.cpp keeps the pointer for good


class BareVision:
    def __init__(self, model_path: str, mmproj_path: str, *, n_ctx: int = 2048, n_batch: int = 512,
                 threads: int = 1, weights=None, marker: str | None = None):
        ll.llama_backend_init()
        ll.llama_log_set(_SILENT, ctypes.c_void_p(0))
        mtmd.mtmd_log_set(_SILENT, ctypes.c_void_p(0))
        mtmd.mtmd_helper_log_set(_SILENT, ctypes.c_void_p(0))
        mparams = ll.llama_model_default_params()
        keep = weights.apply(mparams) if weights is not None else None     # referenced until loaded
        self.model = ll.llama_model_load_from_file(model_path.encode(), mparams)
        del keep
        params = ll.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_threads = params.n_threads_batch = threads
        self.ctx = ll.llama_init_from_model(self.model, params)
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        bos, eos = ll.llama_vocab_bos(self.vocab), ll.llama_vocab_eos(self.vocab)
        # the texts of the BOS and EOS tokenizing adds itself (b"" where it adds none)
        self._added_bos = self.piece(bos) if ll.llama_vocab_get_add_bos(self.vocab) and bos >= 0 else b""
        self._added_eos = self.piece(eos) if ll.llama_vocab_get_add_eos(self.vocab) and eos >= 0 else b""
        self.n_batch = n_batch
        mp = mtmd.mtmd_context_params_default()
        mp.use_gpu, mp.n_threads, mp.print_timings = False, threads, False
        self.marker = (marker or mtmd.mtmd_default_marker().decode()).encode()
        mp.media_marker = self.marker
        self.mtmd = mtmd.mtmd_init_from_file(mmproj_path.encode(), self.model, mp)
        if not self.mtmd:
            raise RuntimeError(f"libmtmd could not load {mmproj_path}")
        self._batch = ll.llama_batch_init(1, 0, 1)

    def close(self) -> None:
        ll.llama_batch_free(self._batch)
        mtmd.mtmd_free(self.mtmd)
        ll.llama_free(self.ctx)
        ll.llama_model_free(self.model)

    def prefill(self, prompt: str, images: list[bytes]) -> tuple[int, float]:
        """The prompt (its markers where the images stand) into a fresh sequence 0: (positions, seconds)."""
        ll.llama_memory_clear(ll.llama_get_memory(self.ctx), True)
        started = time.perf_counter()
        bitmaps = []
        for data in images:
            buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
            bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(self.mtmd, buf, len(data), False)
            if not bitmap:
                raise ValueError("libmtmd could not decode an image")
            bitmaps.append(bitmap)
        text = mtmd.mtmd_input_text()
        text.text = self._without_added_specials(prompt.encode())
        text.text_len = len(text.text)
        text.add_special, text.parse_special = True, True
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            array = (mtmd.mtmd_bitmap_p_ctypes * max(1, len(bitmaps)))(*bitmaps)
            if mtmd.mtmd_tokenize(self.mtmd, chunks, ctypes.byref(text), array, len(bitmaps)) != 0:
                raise RuntimeError("mtmd_tokenize failed")
            n_past = ll.llama_pos(0)
            if mtmd.mtmd_helper_eval_chunks(self.mtmd, self.ctx, chunks, 0, 0, self.n_batch, True,
                                            ctypes.byref(n_past)) != 0:
                raise RuntimeError("mtmd_helper_eval_chunks failed")
        finally:
            mtmd.mtmd_input_chunks_free(chunks)
            for bitmap in bitmaps:
                mtmd.mtmd_bitmap_free(bitmap)
        return n_past.value, time.perf_counter() - started

    def _without_added_specials(self, prompt: bytes) -> bytes:
        """The rendered prompt as llama-server's chat code hands it on (common/chat.cpp): a BOS
        the template wrote goes when tokenizing adds one (an EOS likewise), so there is one."""
        if self._added_bos and prompt.startswith(self._added_bos):
            prompt = prompt[len(self._added_bos):]
        if self._added_eos and prompt.endswith(self._added_eos):
            prompt = prompt[:-len(self._added_eos)]
        return prompt

    def logits(self) -> np.ndarray:
        return np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,)).copy()

    def greedy(self, prompt: str, images: list[bytes], n: int, banned: set[int] = frozenset()) -> list[int]:
        """n tokens chosen greedily after the prompt (tokens in `banned` never chosen)."""
        n_past, _ = self.prefill(prompt, images)
        out = []
        for _ in range(n):
            logits = self.logits()
            for token in banned:
                logits[token] = -np.inf
            token = int(np.argmax(logits))
            out.append(token)
            b = self._batch
            b.token[0], b.pos[0], b.n_seq_id[0], b.logits[0] = token, n_past, 1, True
            b.seq_id[0][0] = 0
            b.n_tokens = 1
            if ll.llama_decode(self.ctx, b) != 0:
                raise RuntimeError("llama_decode failed")
            n_past += 1
        return out

    def piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = ll.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        return buf.raw[:n]
