"""One job's sampler: a native llama.cpp sampler chain (seed, bias, penalties, grammar).

With a grammar, the chain runs over a candidate array of our own and a token is accepted only
once it is known to be legal (see Sampler); ``choose`` touches no llama context, so the runtime
may run it on another thread (pending_sample.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from llama_cpp import llama_cpp as ll

from ..generation import SamplingParams
from .lazy_grammar import grammar_after
from .candidates import CandidateBuffer
from .facade import GrammarError

class SamplingContext(Protocol):
    """What a sampler needs of the engine (engine.Engine is one), named here so that
    engine.py may import this module and not the other way round."""
    n_vocab: int
    n_ctx_seq: int
    vocab: Any
    ctx: Any
    eog_tokens: Sequence[int]

    def logits(self, index: int) -> Any: ...

    def piece(self, token: int) -> bytes: ...

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]: ...

    def grammar_tokens(self, grammar: str) -> frozenset[int]: ...


class NoLegalToken(Exception):
    """Nothing may come next: every token the grammar allows is banned (logit_bias -100).

    ``grammar_complete`` says whether the grammar could end here (only an end-of-generation
    token was legal, and that is banned): then the output is whole and the job ends normally.
    """

    def __init__(self, grammar_complete: bool):
        super().__init__("no token is allowed by both the grammar and logit_bias")
        self.grammar_complete = grammar_complete


class Sampler:
    """A native llama.cpp sampler chain for one job: its seed, grammar and penalties.

    With a grammar, the chain is applied to our own candidate array and the token accepted
    only once it is known to be legal: llama.cpp's grammar throws a C++ exception (which
    aborts the whole process) when asked to accept a token it forbids, and
    ``llama_sampler_sample`` picks one when a logit_bias has banned every token the grammar
    allows.
    """

    def __init__(self, engine: SamplingContext, params: SamplingParams):
        self.engine = engine
        self._argmax_bias = self._plain_greedy_bias(params)
        self._grammar = None            # the chain owns it; kept to ask whether the grammar may end
        self._grammar_apart = False     # a woken call grammar: applied before the chain, owned here
        self._asleep = params.call_grammar if not params.grammar else None
        self._candidates = None
        self._guard = None
        chain = ll.llama_sampler_chain_init(ll.llama_sampler_chain_default_params())
        self.chain = chain
        try:
            self._build(params)
            if self._grammar is not None:
                self._watch(params.grammar, params.grammar_tokens)
        except BaseException:       # the chain (and the grammar in it) is ours alone until we return
            self.free()
            raise

    def _watch(self, grammar: str, named: frozenset[int] | None = None) -> None:
        """Ready to choose under the grammar: our own candidates, and the guard it may need."""
        if named is None:           # not found when the grammar was checked
            named = self.engine.grammar_tokens(grammar)
        if named:
            self._guard = TokenRefGuard(self.engine, self._grammar, named)
        self._candidates = CandidateBuffer(self.engine.n_vocab, keep=self._guard is not None)

    def _add(self, sampler) -> None:
        if not sampler:
            raise GrammarError("sampler initialisation failed")
        ll.llama_sampler_chain_add(self.chain, sampler)

    def _build(self, p: SamplingParams) -> None:
        engine = self.engine
        if p.logit_bias:
            items = (ll.llama_logit_bias * len(p.logit_bias))()
            for i, (token, bias) in enumerate(p.logit_bias.items()):
                items[i].token = token
                items[i].bias = float("-inf") if bias <= -100 else bias
            self._add(ll.llama_sampler_init_logit_bias(engine.n_vocab, len(p.logit_bias), items))
        if p.repeat_penalty != 1.0 or p.frequency_penalty or p.presence_penalty:
            # llama.cpp allocates (and zeroes) a ring of repeat_last_n tokens at once: -1 ("all")
            # would be 8 GB. Nothing older than the context can repeat anyway.
            last_n = min(p.repeat_last_n, engine.n_ctx_seq)
            self._add(ll.llama_sampler_init_penalties(engine.n_vocab, last_n, p.repeat_penalty,
                                                      p.frequency_penalty, p.presence_penalty))
        if p.grammar:
            grammar = ll.llama_sampler_init_grammar(engine.vocab, p.grammar.encode("utf-8"), b"root")
            if not grammar:
                raise GrammarError("the grammar could not be parsed by llama.cpp")
            self._add(grammar)
            self._grammar = grammar
        if p.temperature <= 0:
            self._add(ll.llama_sampler_init_greedy())
            return
        if p.top_k > 0:
            self._add(ll.llama_sampler_init_top_k(p.top_k))
        if p.top_p < 1.0:
            self._add(ll.llama_sampler_init_top_p(p.top_p, 1))
        if p.min_p > 0:
            self._add(ll.llama_sampler_init_min_p(p.min_p, 1))
        if p.typical_p < 1.0:
            self._add(ll.llama_sampler_init_typical(p.typical_p, 1))
        self._add(ll.llama_sampler_init_temp(p.temperature))
        seed = p.seed if p.seed is not None else int.from_bytes(os.urandom(4), "little")
        self._add(ll.llama_sampler_init_dist(seed & 0xFFFFFFFF))

    @staticmethod
    def _plain_greedy_bias(p: SamplingParams):
        """For greedy sampling with nothing but a logit bias: the bias as (ids, values), else None.

        llama_sampler_sample copies all n_vocab candidates into an array on every call
        (0.7 ms for Gemma's 262k vocabulary); an argmax over the logits costs a tenth.
        """
        if p.temperature > 0 or p.grammar or p.repeat_penalty != 1.0 or p.frequency_penalty or p.presence_penalty:
            return None
        import numpy as np
        ids = np.fromiter(p.logit_bias.keys(), dtype=np.int64, count=len(p.logit_bias))
        values = np.array([float("-inf") if b <= -100 else b for b in p.logit_bias.values()], dtype=np.float32)
        return ids, values, frozenset(p.logit_bias)

    @property
    def has_grammar(self) -> bool:
        """A grammar's cost per token has no useful bound: the runtime samples such a job off its thread."""
        return self._grammar is not None

    @property
    def grammar_asleep(self) -> bool:
        """A call grammar waits for the model to open a tool call (wake)."""
        return self._asleep is not None

    def wake(self, lead: bytes, tokens: list[int]) -> bool:
        """The model has opened a tool call, its text so far `lead` (the tail of the token it began
        inside) then `tokens`: from now on the call grammar holds every token, from the state
        after that text. False, and the grammar sleeps on, when the text already strays from it
        (lazy_grammar.py)."""
        grammar = grammar_after(self.engine, self._asleep, lead, tokens)
        if grammar is None:
            return False
        # Outside the chain, applied before it: masking commutes with the bias and penalties
        # that come before a grammar in a chain, and the chain's state (penalties, the seeded
        # draw) goes on as it was.
        self._grammar, self._grammar_apart = grammar, True
        self._watch(self._asleep)
        self._asleep = None
        self._argmax_bias = None        # the chain now chooses over our candidates
        return True

    def sample(self, index: int) -> int:
        """Sample from batch entry `index` of the last decode and accept the token.

        Raises NoLegalToken when the bias and grammar leave no token to choose.
        """
        if self._argmax_bias is not None:
            return self._greedy_with_bias(index)
        if self._grammar is None:       # nothing in the chain can refuse a token: llama.cpp's own loop is safe
            return ll.llama_sampler_sample(self.chain, self.engine.ctx, index)
        self.load(index)
        return self.choose()

    def load(self, index: int) -> None:
        """Copy batch entry `index`'s logits into this sampler's own candidates (before the next decode)."""
        self._candidates.load(self.engine.logits(index))

    def choose(self) -> int:
        """Run the chain over the loaded candidates and accept the token; touches no llama context,
        so it may run on another thread while the runtime decodes."""
        first = self._grammar if self._grammar_apart else None
        while True:
            token, logit = self._candidates.choose(self.chain, first)
            if logit == float("-inf"):      # the chain chose among nothing but forbidden tokens
                raise NoLegalToken(self._grammar_may_end())
            if self._guard is None or self._guard.safe(token):
                break
            self._candidates.reload_without(token)
        ll.llama_sampler_accept(self.chain, token)
        if first is not None:
            ll.llama_sampler_accept(first, token)
        return token

    def choose_run(self, rows, draft: list[int], out: list[int]) -> None:
        """Choose from each loaded logits row in turn while the token chosen equals the draft's
        (the draft token decoded after it gave the next row); each token is appended to `out`.
        Touches no llama context, as choose()."""
        for i, logits in enumerate(rows):
            self._candidates.load(logits)
            token = self.choose()
            out.append(token)
            if i >= len(draft) or token != draft[i]:
                return

    def _greedy_with_bias(self, index: int) -> int:
        # A bias and greedy keep no state, so the chain need not hear of the token.
        ids, values, biased_ids = self._argmax_bias
        logits = self.engine.logits(index)
        best = int(logits.argmax())
        if not len(ids):
            return best
        if best in biased_ids:          # the raw winner is biased itself: bias a copy of all
            biased_all = logits.copy()
            biased_all[ids] += values
            best = int(biased_all.argmax())
            if biased_all[best] == float("-inf"):
                raise NoLegalToken(False)
            return best
        # an unbiased winner only competes with the biased tokens' new values
        biased = logits[ids] + values
        k = int(biased.argmax())
        if biased[k] > logits[best] or (biased[k] == logits[best] and ids[k] < best):
            return int(ids[k])
        return best

    def _grammar_may_end(self) -> bool:
        """Whether the grammar would accept an end-of-generation token now."""
        if self._grammar is None or not self.engine.eog_tokens:
            return False
        probe = CandidateBuffer(1)
        probe.fill_one(self.engine.eog_tokens[0])
        ll.llama_sampler_apply(self._grammar, probe.ref)
        return probe.logit(0) != float("-inf")

    def accept(self, token: int) -> None:
        """Tell the chain about a token chosen elsewhere (forced). Never with a grammar: it could not check it."""
        if self._grammar is not None:
            raise GrammarError("a token cannot be forced past a grammar")
        if self._argmax_bias is None:
            ll.llama_sampler_accept(self.chain, token)

    def free(self) -> None:
        if self.chain:
            ll.llama_sampler_free(self.chain)
            self.chain = None
            if self._grammar_apart:
                ll.llama_sampler_free(self._grammar)
            self._grammar = None


class TokenRefGuard:
    """Keeps a token that llama.cpp's grammar check passes but its accept would throw on.

    A grammar may name a token whole (``<think>``, ``<[7]>``). llama.cpp's check lets a
    token's text begin on the grammar's characters and end on such a name, if the name is
    that same token: with ``root ::= "<" <think>`` the token ``<think>`` passes ("<" by
    character, the rest as the named token). Its accept walks the text by characters only,
    finds no way on, and throws ("Unexpected empty grammar stack after accepting piece"),
    which aborts the process. Only a named token of two or more characters can pass that
    way, so only those are checked, when chosen: one is safe when the grammar cannot take its
    first character as text (it passed as the whole token), or when it can take all of its
    text character by character (tried on a clone, one single-character token at a time).
    Otherwise it is refused and the chain chooses again. Conservative: a grammar that allows
    both "<" followed by <think> and <think> alone at the same point loses the second.
    """

    def __init__(self, engine: SamplingContext, grammar, named: frozenset[int]):
        self.engine = engine
        self.grammar = grammar
        self.named = named
        self._spellings: dict[int, list[int] | None] = {}
        self._probe = CandidateBuffer(1)

    def safe(self, token: int) -> bool:
        if token not in self.named:
            return True
        spelling = self._spelling(token)
        if spelling is None:
            return False
        if len(spelling) < 2 or not self._legal(self.grammar, spelling[0]):
            return True
        clone = ll.llama_sampler_clone(self.grammar)
        if not clone:
            return False
        try:
            for i, single in enumerate(spelling):
                if i and not self._legal(clone, single):
                    return False
                ll.llama_sampler_accept(clone, single)     # one character, legal: cannot throw
            return True
        finally:
            ll.llama_sampler_free(clone)

    def _legal(self, grammar, token: int) -> bool:
        self._probe.fill_one(token)
        ll.llama_sampler_apply(grammar, self._probe.ref)
        return self._probe.logit(0) != float("-inf")

    def _spelling(self, token: int) -> list[int] | None:
        """The token's text as single-character tokens not named by the grammar; None if there is none.
        A token of one character is its own spelling: it passes whole, as itself or as that
        character, never in part each way (spelt by its characters it had none, its own
        tokenization being the named token, and ``root ::= <[id]>`` of it refused every token)."""
        if token not in self._spellings:
            try:
                text = self.engine.piece(token).decode("utf-8")
            except UnicodeDecodeError:
                text = None
            self._spellings[token] = None if text is None else [token] if len(text) == 1 else self._spelt(text)
        return self._spellings[token]

    def _spelt(self, text: str) -> list[int] | None:
        spelling = []
        for char in text:
            tokens = self.engine.tokenize(char, add_special=False, parse_special=False)
            if (len(tokens) != 1 or tokens[0] in self.named
                    or self.engine.piece(tokens[0]) != char.encode("utf-8")):
                return None
            spelling.append(tokens[0])
        return spelling
