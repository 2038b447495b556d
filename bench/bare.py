"""The floor: a minimal prefill + greedy decode loop over llama.cpp's low-level bindings.

Nothing of localserve is used here but the weight layout (``weights``, a
cpu_weights.WeightPlan: the one the server chooses, so that both run the same kernels
and neither the AMX ones that may crash): this is what the engine itself can do with
the same model, context size and threads, so the server's figures divide by these.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np
from llama_cpp import llama_cpp as ll

from localserve.ops import memory


class BareEngine:
    def __init__(self, path: str, *, n_ctx: int, threads: int, n_batch: int = 512, n_seq: int = 4, weights=None,
                 unified: bool = False):
        ll.llama_backend_init()
        memory.configure_malloc()      # llama.cpp's buffers placed as the server places them (ops/memory.py)
        self._silence()
        mparams = ll.llama_model_default_params()
        keep = weights.apply(mparams) if weights is not None else None     # referenced until loaded
        self.model = ll.llama_model_load_from_file(path.encode(), mparams)
        del keep
        params = ll.llama_context_default_params()
        # The server's layout (localserve/engine/engine.py builds its context the same way): n_seq
        # sequences of n_ctx each, one KV stream per sequence, sliding-window layers holding only
        # their window, and logits rows for one token per sequence per step. `unified`: one pool of
        # cells for all sequences, as prefix sharing has it (bench/agents.py copies a prefix in it).
        params.n_ctx, params.n_seq_max, params.kv_unified = n_ctx * n_seq, n_seq, unified
        params.n_batch, params.n_ubatch = n_batch, n_batch
        # a copied prefix's cells are owned by several sequences, which a window-sized cache never
        # frees: with `unified` the sliding-window layers keep the whole context (llama-server's --swa-full)
        params.swa_full = unified
        params.n_outputs_max = n_seq
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        self.ctx = ll.llama_init_from_model(self.model, params)
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        self.n_batch = n_batch
        self.n_seq = n_seq
        self.memory = ll.llama_get_memory(self.ctx)
        self.ban = np.array(self.eog_tokens(), dtype=np.int64)    # the workload bans end-of-generation
        self._batch = ll.llama_batch_init(n_batch, 0, 1)

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

    def greedy(self, row: int) -> int:
        """Greedy with the end-of-generation tokens banned: an argmax, the cheapest sampling there is."""
        logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(self.ctx, row), shape=(self.n_vocab,))
        logits[self.ban] = -np.inf
        return int(logits.argmax())

    def eog_tokens(self) -> list[int]:
        return [t for t in range(self.n_vocab) if ll.llama_vocab_is_eog(self.vocab, t)]

    def _decode(self, tokens: list[int], start: int) -> None:
        arr = (ll.llama_token * len(tokens))(*tokens)
        batch = ll.llama_batch_get_one(arr, len(tokens))
        if ll.llama_decode(self.ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def sampler_chain(self, sampling: dict, seed: int = 1234):
        """llama.cpp's own sampler chain for these settings (temperature, top_k, top_p, min_p),
        end-of-generation banned as the workload bans it; free it with llama_sampler_free."""
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        ban = (ll.llama_logit_bias * len(self.ban))()
        for i, token in enumerate(self.ban):
            ban[i].token, ban[i].bias = int(token), float("-inf")
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_logit_bias(self.n_vocab, len(self.ban), ban))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_k(sampling["top_k"]))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_top_p(sampling["top_p"], 1))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_min_p(sampling["min_p"], 1))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_temp(sampling["temperature"]))
        ll.llama_sampler_chain_add(chain, ll.llama_sampler_init_dist(seed))
        return chain

    def run(self, prompt: list[int], n_new: int, *, keep: int = 0, sampling: dict | None = None) -> tuple[float, float]:
        """(seconds to prefill prompt[keep:] and sample the first token, decode tokens/s);
        greedy, or llama.cpp's sampler chain for `sampling` (sampler_chain)."""
        chain = self.sampler_chain(sampling) if sampling else None
        pick = (lambda: ll.llama_sampler_sample(chain, self.ctx, -1)) if chain else (lambda: self.greedy(-1))
        ll.llama_memory_seq_rm(self.memory, 0, keep, -1)
        started = time.perf_counter()
        for i in range(keep, len(prompt), self.n_batch):
            self._decode(prompt[i:i + self.n_batch], i)
        token = pick()
        first = time.perf_counter()
        for _ in range(n_new - 1):
            self._decode([token], 0)
            token = pick()
        done = time.perf_counter()
        if chain:
            ll.llama_sampler_free(chain)
        return first - started, (n_new - 1) / (done - first)

    def prefill(self, tokens: list[int]) -> None:
        """Decode tokens after what sequence 0 holds, n_batch at a time (the caller times it)."""
        for i in range(0, len(tokens), self.n_batch):
            self._decode(tokens[i:i + self.n_batch], 0)

    def resident(self, seq: int, tokens: list[int]) -> None:
        """Prefill tokens into sequence seq (untimed): a conversation's first turn."""
        ll.llama_memory_seq_rm(self.memory, seq, 0, -1)
        entries = [(token, pos, seq, False) for pos, token in enumerate(tokens)]
        for i in range(0, len(entries), self.n_batch):
            self._decode_entries(entries[i:i + self.n_batch])

    def extend(self, seq: int, start: int, tokens: list[int]) -> float:
        """Seconds to prefill tokens at position start of sequence seq and pick the next token."""
        ll.llama_memory_seq_rm(self.memory, seq, start, -1)
        started = time.perf_counter()
        for i in range(0, len(tokens), self.n_batch):
            chunk = tokens[i:i + self.n_batch]
            self._decode_entries([(t, start + i + j, seq, i + j == len(tokens) - 1) for j, t in enumerate(chunk)])
        self.greedy(-1)
        return time.perf_counter() - started

    def aggregate(self, prompts: list[list[int]], n_new: int, sampling: dict | None = None) -> float:
        """Tokens/s for all prompts, n_seq at a time: each wave prefilled together, then decoded in lockstep;
        greedy, or a sampler chain per sequence for `sampling`."""
        started = time.perf_counter()
        for w in range(0, len(prompts), self.n_seq):
            self._wave(prompts[w:w + self.n_seq], n_new, sampling)
        return len(prompts) * n_new / (time.perf_counter() - started)

    def _wave(self, prompts: list[list[int]], n_new: int, sampling: dict | None = None) -> None:
        chains = [self.sampler_chain(sampling, seed=1234 + seq) for seq in range(len(prompts))] if sampling else []

        def pick(seq: int, row: int) -> int:
            return ll.llama_sampler_sample(chains[seq], self.ctx, row) if chains else self.greedy(row)

        ll.llama_memory_clear(self.memory, True)
        entries = [(token, pos, seq, pos == len(p) - 1) for seq, p in enumerate(prompts) for pos, token in enumerate(p)]
        tokens = [0] * len(prompts)
        for i in range(0, len(entries), self.n_batch):
            chunk = entries[i:i + self.n_batch]
            self._decode_entries(chunk)
            for row, (_, _, seq, wants_logits) in enumerate(chunk):
                if wants_logits:
                    tokens[seq] = pick(seq, row)
        positions = [len(p) for p in prompts]
        for _ in range(n_new - 1):
            self._decode_entries([(t, pos, seq, True) for seq, (t, pos) in enumerate(zip(tokens, positions))])
            tokens = [pick(seq, seq) for seq in range(len(prompts))]
            positions = [pos + 1 for pos in positions]
        for chain in chains:
            ll.llama_sampler_free(chain)

    def _decode_entries(self, entries: list[tuple[int, int, int, bool]]) -> None:
        batch = self._batch
        for i, (token, pos, seq, logits) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, logits
            batch.seq_id[i][0] = seq
        batch.n_tokens = len(entries)
        if ll.llama_decode(self.ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")

    def close(self) -> None:
        ll.llama_batch_free(self._batch)
        ll.llama_free(self.ctx)
        ll.llama_model_free(self.model)
