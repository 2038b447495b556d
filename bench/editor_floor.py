"""The editor workload's floor (bench/editor.py): the bare engine typing the same keystrokes.

Each keystroke's prompt is built by the server's own prompt/fim.py on the bare engine's
vocabulary, prefilled on top of what sequence 0 already holds, then decoded greedily. On a
model with sliding-window layers the floor keeps its own window checkpoints, as the server does.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass

from llama_cpp import llama_cpp as ll

from localserve.engine import file_facts
from localserve.engine.facade import FimTokens
from localserve.prompt.fim import ExtraFile, FimInput, build_fim_prompt
from localserve.runtime.promptcache import common_prefix

from .bare import BareEngine


@dataclass
class Keystroke:
    """One keystroke's figures: seconds to the first token and to the last, tokens answered,
    the prompt's tokens and how many of them were computed."""
    ttft: float
    last: float
    tokens: int
    prompt: int
    computed: int


class BareVocab:
    """What prompt/fim.py reads of a model, from the bare engine: the same prompt tokens as the server's."""

    def __init__(self, engine: BareEngine, n_ctx: int):
        self.engine = engine
        self.n_ctx = n_ctx
        vocab = engine.vocab

        def token(read) -> int | None:
            found = read(vocab)
            return found if 0 <= found < engine.n_vocab else None
        self.fim = FimTokens(pre=token(ll.llama_vocab_fim_pre), suf=token(ll.llama_vocab_fim_suf),
                             mid=token(ll.llama_vocab_fim_mid), pad=token(ll.llama_vocab_fim_pad),
                             rep=token(ll.llama_vocab_fim_rep), sep=token(ll.llama_vocab_fim_sep))
        bos = ll.llama_vocab_bos(vocab)
        self.prompt_start = [bos] if ll.llama_vocab_get_add_bos(vocab) and bos >= 0 else []
        # what the server's engine reads: how far a text in characters can run before it is cut
        self.max_piece_bytes = file_facts.longest_piece(("bench", id(vocab)), vocab, engine.n_vocab)

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True, limit=None) -> list[int]:
        data = text.encode()
        buf = (ll.llama_token * (len(data) + 8))()
        n = ll.llama_tokenize(self.engine.vocab, data, len(data), buf, len(buf), add_special, parse_special)
        return list(buf[:n])


class WindowCheckpoints:
    """The floor's own context checkpoints, for a model with a sliding window: its cache keeps
    only the window (as the server's does), so a keystroke that cuts the sequence further back
    than the window still holds goes back to the window's state saved at the last cut (what
    llama-server and localserve's swa_checkpoints.py do), and each cut is saved. Without them
    the bare loop would prefill on top of a window that has dropped positions the new tokens
    attend to: cheap, and wrong."""

    KEPT = 4

    def __init__(self, engine: BareEngine):
        self.engine = engine
        self.n_swa = ll.llama_model_n_swa(engine.model)
        self.saved: list[tuple[list[int], object]] = []     # (tokens, window state), newest first
        self.restored = 0

    def cut(self, tokens: list[int], keep: int) -> int:
        """Sequence 0 cut to a prefix of tokens: `keep` of them, or fewer when its window has moved
        past `keep` and a checkpoint is restored (0 when none fits)."""
        memory, ctx = self.engine.memory, self.engine.ctx
        if self.n_swa <= 0 or ll.llama_memory_seq_pos_min(memory, 0) <= max(0, keep - self.n_swa):
            ll.llama_memory_seq_rm(memory, 0, keep, -1)
            return keep
        fitting = [(held, state) for held, state in self.saved if len(held) <= keep and tokens[:len(held)] == held]
        if not fitting:
            ll.llama_memory_seq_rm(memory, 0, 0, -1)
            return 0
        held, state = max(fitting, key=lambda saved: len(saved[0]))
        ll.llama_state_seq_set_data_ext(ctx, state, len(state), 0, ll.LLAMA_STATE_SEQ_FLAGS_SWA_ONLY)
        ll.llama_memory_seq_rm(memory, 0, len(held), -1)
        self.restored += 1
        return len(held)

    def save(self, tokens: list[int]) -> None:
        """Sequence 0 holds tokens: its window saved there."""
        if self.n_swa <= 0 or any(held == tokens for held, _ in self.saved):
            return
        flags = ll.LLAMA_STATE_SEQ_FLAGS_SWA_ONLY
        size = ll.llama_state_seq_get_size_ext(self.engine.ctx, 0, flags)
        state = (ctypes.c_uint8 * size)()
        ll.llama_state_seq_get_data_ext(self.engine.ctx, state, size, 0, flags)
        self.saved = [(list(tokens), state), *self.saved[:self.KEPT - 1]]


class BareEditor:
    """The floor: the same prompts (prompt/fim.py on the bare engine's vocabulary), each
    prefilled on top of what the sequence already holds (back to a window checkpoint where the
    window has moved on, one saved at each cut: WindowCheckpoints), then `predict` greedy tokens."""

    def __init__(self, engine: BareEngine, vocab: BareVocab, chunks: list[ExtraFile], predict: int):
        self.engine, self.vocab, self.chunks, self.predict = engine, vocab, chunks, predict
        self.checkpoints = WindowCheckpoints(engine)
        self.held: list[int] = []

    def _prompt(self, fields: dict) -> list[int]:
        return build_fim_prompt(self.vocab, FimInput(prefix=fields["input_prefix"], suffix=fields["input_suffix"],
                                                     prompt=fields["prompt"], extra=self.chunks))

    def warm(self) -> None:
        self.held = self._prompt({"input_prefix": "", "input_suffix": "", "prompt": ""})
        self.engine.run(self.held, 1)

    def keystroke(self, step: dict) -> Keystroke:
        engine, tokens = self.engine, self._prompt(step)
        keep = min(common_prefix(self.held, tokens), len(tokens) - 1)
        started = time.perf_counter()
        start = self.checkpoints.cut(tokens, keep)
        engine.prefill(tokens[start:keep])
        self.checkpoints.save(tokens[:keep])
        engine.prefill(tokens[keep:])
        token = engine.greedy(-1)
        ttft = time.perf_counter() - started
        for _ in range(self.predict - 1):
            engine.prefill([token])
            token = engine.greedy(-1)
        self.held = tokens
        return Keystroke(ttft, time.perf_counter() - started, self.predict, len(tokens), len(tokens) - start)

    def restored(self) -> int:
        return self.checkpoints.restored
