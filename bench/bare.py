"""The floor: a minimal prefill + greedy decode loop over llama.cpp's low-level bindings.

Nothing of localserve is used here: this is what the engine itself can do with the
same model, context size and threads, so the server's figures divide by these.
"""

from __future__ import annotations

import ctypes
import time

from llama_cpp import llama_cpp as ll


class BareEngine:
    def __init__(self, path: str, *, n_ctx: int, threads: int, n_batch: int = 512):
        ll.llama_backend_init()
        self._silence()
        self.model = ll.llama_model_load_from_file(path.encode(), ll.llama_model_default_params())
        params = ll.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_batch
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        self.ctx = ll.llama_init_from_model(self.model, params)
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self.n_batch = n_batch
        self.memory = ll.llama_get_memory(self.ctx)

    def _silence(self) -> None:
        self._log = ll.llama_log_callback(lambda *_: None)
        ll.llama_log_set(self._log, ctypes.c_void_p(0))

    def tokenize(self, text: str) -> list[int]:
        data = text.encode()
        buf = (ll.llama_token * (len(data) + 8))()
        n = ll.llama_tokenize(self.vocab, data, len(data), buf, len(buf), True, True)
        return list(buf[:n])

    def detokenize(self, tokens: list[int]) -> str:
        buf = ctypes.create_string_buffer(len(tokens) * 64 + 64)
        n = ll.llama_detokenize(self.vocab, (ll.llama_token * len(tokens))(*tokens), len(tokens), buf, len(buf),
                                True, False)
        return buf.raw[:max(n, 0)].decode("utf-8", "replace")

    def sampler(self, ban: list[int]):
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        bias = (ll.llama_logit_bias * len(ban))()
        for i, token in enumerate(ban):
            bias[i].token, bias[i].bias = token, float("-inf")
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_logit_bias(self.n_vocab, len(ban), bias))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_greedy())
        return chain

    def eog_tokens(self) -> list[int]:
        return [t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(self.vocab, t)]

    def _decode(self, tokens: list[int], start: int) -> None:
        arr = (ll.llama_token * len(tokens))(*tokens)
        batch = ll.llama_batch_get_one(arr, len(tokens))
        if ll.llama_decode(self.ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def run(self, prompt: list[int], n_new: int, *, keep: int = 0) -> tuple[float, float]:
        """(seconds to prefill prompt[keep:] and sample the first token, decode tokens/s)."""
        ll.llama_memory_seq_rm(self.memory, 0, keep, -1)
        chain = self.sampler(self.eog_tokens())
        started = time.perf_counter()
        for i in range(keep, len(prompt), self.n_batch):
            self._decode(prompt[i:i + self.n_batch], i)
        token = ll.llama_sampler_sample(chain, self.ctx, -1)
        first = time.perf_counter()
        for _ in range(n_new - 1):
            self._decode([token], 0)
            token = ll.llama_sampler_sample(chain, self.ctx, -1)
        done = time.perf_counter()
        ll.llama_sampler_free(chain)
        return first - started, (n_new - 1) / (done - first)

    def close(self) -> None:
        ll.llama_free(self.ctx)
        ll.llama_model_free(self.model)
