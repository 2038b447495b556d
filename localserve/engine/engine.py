"""llama.cpp through llama-cpp-python's low-level bindings.

Only the runtime thread calls into an Engine after start-up; connection threads
reach it through facade.EngineFacade, whose calls are safe off that thread. The engine knows
tokens, sequences and logits; it knows nothing about requests or dialects.
Why not ``Llama.create_completion``: it costs Python work per token and
re-detokenizes the whole output each step; here one token costs one piece lookup.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
import time
from typing import Callable, Sequence

from llama_cpp import llama_cpp as ll

from . import cpu_weights, file_facts, model_facts, model_load, prefix_copy
from ..generation import AdapterSet, SamplingParams
from .decode_batch import DECODE_ABORTED, DecodeBatch, DecodeError
from .facade import GrammarError, TooManyTokens
from .lora import LoraAdapters
from .ggml_lib import device_report
from .model_load import ModelLoadError, check_model_file, quiet_llama_logs
from .sampler import NoLegalToken, Sampler
from .sequences import Sequences
from .stopwatch import Stopwatch
from .thread_policy import STEP_COST_ROWS, StepCosts, measure_step_costs
from .threadpool import StepThreads
from ..grammar.scan import token_refs
from ..settings import step_drafts

TOKENIZE_ALONE_BYTES = 256 * 1024  # texts this long are tokenized one at a time (~40 B of work per byte)

__all__ = ["DECODE_ABORTED", "DecodeError", "Engine", "GrammarError", "ModelLoadError", "NoLegalToken",
           "Sampler", "check_model_file", "quiet_llama_logs"]

log = logging.getLogger("localserve.engine")


class Engine:
    projector = None        # the model's vision projector (vision.py), attached once both are loaded
    lora: LoraAdapters | None = None    # the model's LoRA adapters (lora.py), attached once loaded

    def __init__(self, path: str, *, n_ctx: int | None, n_seq: int, n_batch: int, threads: int,
                 n_gpu_layers: int = 0, max_default_ctx: int = 8192,
                 tensor_split: Sequence[float] | None = None, cpu_weights_mode: str = "auto",
                 draft_max: int = 0, stopwatch: Stopwatch | None = None, share_prefixes: bool = True,
                 kv_unified: bool = False, max_threads: int | None = None, adapt_threads: bool = False,
                 on_progress: Callable[[float], None] | None = None):
        watch = self.stopwatch = stopwatch or Stopwatch()     # each step's time, for the debug log
        check_model_file(path)
        self._file = key = file_facts.file_key(path)
        ll.llama_backend_init()
        mparams = ll.llama_model_default_params()
        mparams.n_gpu_layers = 0x7FFFFFFF if n_gpu_layers < 0 else n_gpu_layers
        split = model_load.tensor_split(tensor_split)     # referenced until the model is loaded
        if split is not None:
            mparams.tensor_split = split
        progress = model_load.progress_callback(on_progress)     # likewise
        if progress is not None:
            mparams.progress_callback = progress
        model_load.recent_native_errors.clear()
        model_load.load_messages.clear()
        model_load.capture_only.on = True
        try:
            self.weight_plan = file_facts.remembered(
                ("weight plan", key, cpu_weights_mode, n_gpu_layers),
                lambda: cpu_weights.plan(path, cpu_weights_mode, n_gpu_layers=n_gpu_layers))
            watch.lap("weight plan")
            overrides = self.weight_plan.apply(mparams)     # referenced until the model is loaded
            self.model = ll.llama_model_load_from_file(path.encode(), mparams)
            del overrides, progress
        finally:
            model_load.capture_only.on = False
        watch.lap("llama.cpp load")
        if not self.model:
            raise ModelLoadError(f"llama.cpp could not load {path}: {model_load.native_reason()}")
        self.weight_buffers = cpu_weights.buffer_sizes(model_load.load_messages)     # {buffer type: MiB}
        self.vocab = ll.llama_model_get_vocab(self.model)
        self.n_layer = ll.llama_model_n_layer(self.model)
        # llama.cpp offloads the output layer too: n_layer + 1 layers in all
        self.gpu_available = bool(ll.llama_supports_gpu_offload())
        self.layer_devices = model_load.layer_devices()
        self.gpu_layers = sum(1 for d in self.layer_devices.values() if d != "CPU")
        self.n_vocab = ll.llama_vocab_n_tokens(self.vocab)
        n_ctx_train = ll.llama_model_n_ctx_train(self.model)
        self.n_ctx_seq = n_ctx or min(n_ctx_train or max_default_ctx, max_default_ctx)
        self.n_seq = n_seq
        self.n_batch = n_batch
        cparams = ll.llama_context_default_params()
        # Each sequence gets the whole --ctx-size: the KV cache is sized for all of them.
        cparams.n_ctx = self.n_ctx_seq * n_seq
        # --kv-unified: one pool of cells for all sequences, so that one can own another's prefix
        # (prefix_copy.py); by default a stream per sequence, and a prefix is copied as data.
        if kv_unified:
            cparams.n_ctx, self.n_ctx_seq = prefix_copy.context_sizes(self.n_ctx_seq, n_seq)
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = kv_unified
        # Sliding-window layers keep only their window (llama.cpp's default keeps it all);
        # Runtime checks with can_extend() that a cached prefix is still usable.
        cparams.swa_full = False
        # One logits row per sequence per step, and one per drafted token (speculative decoding:
        # as many as a step verifies, settings.step_drafts), is all we read; llama.cpp would
        # otherwise reserve n_batch rows of n_vocab floats (512 MB for Gemma 3).
        cparams.n_outputs_max = n_seq + (step_drafts(draft_max) if draft_max > 0 else 0)
        cparams.no_perf = True
        model_load.recent_native_errors.clear()
        model_load.whole_cache_context.on = kv_unified
        try:
            self.ctx = ll.llama_init_from_model(self.model, cparams)
        finally:
            model_load.whole_cache_context.on = False
        if kv_unified and self.ctx and 0 < n_ctx_train < self.n_ctx_seq:
            log.warning("each sequence's context (%d) passes the model's training context (%d)", self.n_ctx_seq,
                        n_ctx_train)
        if self.ctx and not ll.llama_get_memory(self.ctx):
            # No KV cache: an encoder (BERT family), which outputs every token it runs (llama.cpp
            # asserts room for them all): made again with room for a whole batch. It only embeds.
            ll.llama_free(self.ctx)
            cparams.n_outputs_max = n_batch
            self.ctx = ll.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            ll.llama_model_free(self.model)
            raise ModelLoadError(f"llama.cpp could not create a context of {cparams.n_ctx} tokens for {path} "
                                 f"({model_load.native_reason()}; try a smaller --ctx-size)")
        self.step_threads = StepThreads(self.ctx, threads, max(threads, max_threads or threads))
        self.wanted_threads = threads   # set by any thread (models/manager.py), applied before a decode
        watch.lap("context")
        if not kv_unified and hasattr(ll, "llama_n_ctx_seq"):   # a unified cache's is the whole cache's
            self.n_ctx_seq = ll.llama_n_ctx_seq(self.ctx)
        self.memory = ll.llama_get_memory(self.ctx)
        self.sequences = Sequences(   # the KV cache's sequences, which the runtime cuts, copies, saves
            self.ctx, self.memory, n_swa=ll.llama_model_n_swa(self.model),
            copy_blocker=prefix_copy.copy_blocker(self.model) if share_prefixes else prefix_copy.SHARING_OFF,
            shares_cells=kv_unified and prefix_copy.shares_cells(self.model))
        self._batch = DecodeBatch(self.ctx, n_batch=n_batch, n_vocab=self.n_vocab, n_seq=n_seq)
        self._pieces: list[bytes | None] = [None] * self.n_vocab
        self.eog_tokens = list(file_facts.eog_tokens(key, self.vocab, self.n_vocab))
        self._eog = [False] * self.n_vocab
        for token in self.eog_tokens:
            self._eog[token] = True
        self._big_tokenize = threading.Lock()
        self.info = model_facts.model_info(self.model, self.vocab, path, n_ctx_train, self.token_text)
        self._adds_bos = bool(ll.llama_vocab_get_add_bos(self.vocab))
        self._adds_eos = bool(ll.llama_vocab_get_add_eos(self.vocab))
        self.fim = model_facts.fim_tokens(self.vocab, self.n_vocab)
        bos = ll.llama_vocab_bos(self.vocab)
        self.prompt_start = [bos] if self._adds_bos and bos >= 0 else []
        self.devices = device_report(self.layer_devices)     # each device: its layers, its memory now
        if any(d.kind != "cpu" for d in self.devices):
            log.info("devices: %s", "; ".join(d.summary() for d in self.devices))
        watch.lap("end-of-generation tokens, model facts")
        # the same file with the same weight layout ran it already in this process
        warm_key = (key, self.weight_plan.mode, self.weight_plan.layout)
        self.warmup_seconds = 0.0 if file_facts.warmed(warm_key) else self._warm_up()
        file_facts.mark_warmed(warm_key)
        watch.lap("warm-up decode")
        self.step_costs = self._step_costs(warm_key, (adapt_threads and threads > 1) or draft_max > 0,
                                           min(1 + draft_max, STEP_COST_ROWS, cparams.n_outputs_max, n_batch))
        self.step_threads.measured(self.step_costs, adapt_threads)
        watch.lap("step costs")

    def _warm_up(self) -> float:
        """Decode two tokens, then one more, and forget them, as llama-server warms up at load.

        The first decodes are where a native problem with the weights shows (AMX's crash,
        cpu_weights.py): at start, before /health says ok, never at a user's first request.
        Both shapes run, because ggml multiplies a batch of one by other kernels than a
        longer batch (AMX's crash is in the latter). The pair asks for no logits: the
        output layer's product (a row for each token that wants logits, one here) then
        runs in the last decode alone, at the shape every first token takes (asked of the
        pair as well, it was two fifths of the warm-up for Gemma 3's 262k-token vocabulary).
        """
        bos, eos = ll.llama_vocab_bos(self.vocab), ll.llama_vocab_eos(self.vocab)
        first, second = max(bos, 0), max(eos, 0)
        pair = [(first, 0, 0, False), (second, 1, 0, False)]
        started = time.perf_counter()
        try:
            for i in range(0, len(pair), self.n_batch):      # --batch-size 1 takes them one by one
                self.decode(pair[i:i + self.n_batch])
            self.decode([(second, 2, 0, True)])
        except DecodeError as exc:
            self.close()
            raise ModelLoadError(f"the warm-up decode failed: {exc} ({model_load.native_reason()})") from None
        self.clear()
        return time.perf_counter() - started

    def _step_costs(self, warm_key: tuple, wanted: bool, rows: int) -> StepCosts | None:
        """This box's quiet cost of a one-token step and of each further row with logits (the thread
        policy's yardstick, and a drafted token's price: speculative.py); measured once per file and
        layout in a process. None where nothing uses it, or for an encoder (no KV cache to step)."""
        if not wanted or not self.memory:
            return None
        token = max(ll.llama_vocab_bos(self.vocab), 0)
        found = file_facts.remembered(("step costs", *warm_key, self.threads, rows),
                                      lambda: measure_step_costs(lambda n: self._timed_step(token, n), rows))
        return StepCosts(found.one, found.row, found.rows)      # a copy: the policy lowers its own as it learns

    def _timed_step(self, token: int, rows: int) -> float:
        started = time.perf_counter()
        self._batch.decode([(token, i, 0, True) for i in range(rows)])
        seconds = time.perf_counter() - started
        self.clear()
        return seconds

    # ---- model facts ---------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        return model_facts.meta(self.model, key)

    # ---- tokens --------------------------------------------------------------------

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True,
                 limit: int | None = None) -> list[int]:
        """The tokens of text; with a limit, TooManyTokens when there would be more.

        llama.cpp's tokenizers take some 40 bytes of working memory per byte of text. So a text
        that can't make `limit` tokens or fewer (longer than limit × the longest piece) never
        reaches them, and big texts are tokenized one at a time: at most one such peak at once.
        """
        if add_special and parse_special:
            text = self._without_added_specials(text)
        self._check_length(len(text), limit)        # characters ≤ bytes: a cheap first look
        data = text.encode("utf-8")
        self._check_length(len(data), limit)
        capacity = len(data) + 8 if limit is None else min(len(data) + 8, limit + 1)
        buf = (ll.llama_token * capacity)()
        with self._big_tokenize if len(data) > TOKENIZE_ALONE_BYTES else contextlib.nullcontext():
            n = ll.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
            if n < 0 and limit is not None:
                raise TooManyTokens(-n)
            if n < 0:
                capacity = -n
                buf = (ll.llama_token * capacity)()
                n = ll.llama_tokenize(self.vocab, data, len(data), buf, capacity, add_special, parse_special)
        return list(buf[:n])

    def _check_length(self, length: int, limit: int | None) -> None:
        """TooManyTokens if `length` characters or bytes surely make more than `limit` tokens.

        A text no longer than `limit` always could fit: only a longer one needs the longest
        piece, scanned once per file when first needed (file_facts.py), not at load.
        """
        if limit is not None and length > limit and length > limit * self.max_piece_bytes:
            raise TooManyTokens(-(-length // self.max_piece_bytes))

    @property
    def max_piece_bytes(self) -> int:
        return file_facts.longest_piece(self._file, self.vocab, self.n_vocab)

    def _without_added_specials(self, text: str) -> str:
        """The text less a leading BOS (a trailing EOS) that llama.cpp is about to add itself.

        Chat templates write the BOS text; llama.cpp would add a second BOS and log a
        warning on every request. As llama.cpp's own chat code does, the written one goes:
        the tokens are the same as with one BOS, and nothing is logged.
        """
        bos, eos = self.info.bos_token, self.info.eos_token
        if bos and self._adds_bos and text.startswith(bos):
            text = text[len(bos):]
        if eos and self._adds_eos and text.endswith(eos):
            text = text[:-len(eos)]
        return text

    def piece(self, token: int) -> bytes:
        """The bytes of one token, special tokens rendered as their text (cached)."""
        cached = self._pieces[token]
        if cached is None:
            buf = ctypes.create_string_buffer(64)
            n = ll.llama_token_to_piece(self.vocab, token, buf, 64, 0, True)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = ll.llama_token_to_piece(self.vocab, token, buf, -n, 0, True)
            cached = buf.raw[:n]
            self._pieces[token] = cached
        return cached

    def token_text(self, token: int) -> str:
        return self.piece(token).decode("utf-8", "replace")

    def detokenize(self, tokens: Sequence[int]) -> str:
        text = bytearray()          # b"".join of a generator holds every piece at once first
        for t in tokens:
            if 0 <= t < self.n_vocab:
                text += self.piece(t)
        return text.decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return self._eog[token]

    def valid_token(self, token: int) -> bool:
        return 0 <= token < self.n_vocab

    def clear(self) -> None:
        ll.llama_memory_clear(self.memory, True)

    def use_adapters(self, adapters: AdapterSet) -> None:
        """The LoRA adapters (and scales) the next decodes run under: one set for a whole batch."""
        if self.lora is not None:
            self.lora.use(self.ctx, adapters)

    def decode(self, entries: Sequence[tuple[int, int, int, bool]], abort_check: Callable[[], bool] | None = None) -> None:
        """Decode (token, position, seq_id, wants_logits) entries in one llama_decode call.

        abort_check is polled by llama.cpp between graph nodes; used only for prompt
        chunks, where one call can take long enough for a cancel to matter.
        """
        self.step_threads.before_step(self.wanted_threads)
        started = time.perf_counter()
        self._batch.decode(entries, abort_check)
        if self._batch.n_outputs == len(entries):       # a decode step: its quiet cost is known
            self.step_threads.policy.observe(len(entries), time.perf_counter() - started)

    @property
    def threads(self) -> int:
        """Threads its decode steps run on now."""
        return self.step_threads.in_use

    def threads_json(self) -> dict:
        """Its threads (/slots): in use now, the most it may use, whether the count adapts, its pool's workers."""
        return self.step_threads.as_json()

    def logits(self, index: int):
        """Raw logits of batch entry `index` of the last decode, as a numpy view (n_vocab floats)."""
        return self._batch.logits(index)

    # ---- sampling ------------------------------------------------------------------

    def new_sampler(self, params: SamplingParams) -> "Sampler":
        return Sampler(self, params)

    def check_grammar(self, grammar: str) -> frozenset[int]:
        """Raise GrammarError unless llama.cpp parses the grammar and it is safe to run; the tokens
        it names whole (grammar_tokens), for the sampler, so the runtime thread need not scan it again."""
        named = self.grammar_tokens(grammar)
        sampler = ll.llama_sampler_init_grammar(self.vocab, grammar.encode("utf-8"), b"root")
        if not sampler:
            raise GrammarError("the grammar could not be parsed by llama.cpp (check the GBNF syntax "
                               "and that a 'root' rule exists)")
        ll.llama_sampler_free(sampler)
        return named

    def grammar_tokens(self, grammar: str) -> frozenset[int]:
        """The tokens a GBNF names whole (``<think>``, ``<[7]>``); GrammarError for one it must not name.

        An end-of-generation token makes llama.cpp abort the whole process once it is chosen.
        A negated one (``!<think>``) lets llama.cpp's check pass a token whose text begins
        inside the grammar's characters and ends on the negation, and its accept then throws
        (and aborts): the sampler guards the named tokens (sampler.TokenRefGuard), but a
        negation matches nearly every token.
        """
        tokens: set[int] = set()
        if "<" not in grammar:          # the scan is Python, ~0.1 ms a KiB; most built grammars name none
            return frozenset()
        for ref, negated in token_refs(grammar):
            if negated:
                raise GrammarError(f"the grammar negates a token (!<{ref}>): not supported, "
                                   f"llama.cpp can abort on it; spell the text it may not be instead")
            by_id = ref.startswith("[") and ref.endswith("]") and ref[1:-1].isdigit()     # <[7]>
            token = int(ref[1:-1]) if by_id else self._single_token(ref)
            if token is None or not 0 <= token < self.n_vocab:
                continue                # llama.cpp's parser names the error
            if self.is_eog(token):
                raise GrammarError(f"the grammar names the end-of-generation token <{ref}>; "
                                   f"generation ends there by itself, leave it out")
            tokens.add(token)
        return frozenset(tokens)

    def _single_token(self, text: str) -> int | None:
        tokens = self.tokenize(f"<{text}>", add_special=False, parse_special=True)
        return tokens[0] if len(tokens) == 1 else None

    def close(self) -> None:
        if self.projector is not None:
            self.projector.close()
            self.projector = None
        if self.ctx:
            self.step_threads.free()
            self._batch.free()
            ll.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            ll.llama_model_free(self.model)
            self.model = None
