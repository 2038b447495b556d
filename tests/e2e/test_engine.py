"""localserve.engine.engine on a tiny real model: its shortcuts must agree with llama.cpp's own paths."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from llama_cpp import llama_cpp as ll

from localserve.engine import file_facts
from localserve.engine.lazy_grammar import grammar_after
from localserve.engine.engine import Engine
from localserve.engine.facade import GrammarError, TooManyTokens
from localserve.generation import SamplingParams
from tinymodel import write_tiny_gguf


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("engine") / "tiny.gguf")
    eng = Engine(str(path), n_ctx=256, n_seq=3, n_batch=64, threads=1)
    yield eng
    eng.close()


def prefill(engine: Engine, texts: list[str]) -> list[int]:
    """Each text into its own sequence, one batch; the batch index of each text's last token."""
    engine.clear()
    entries, last_rows = [], []
    for seq, text in enumerate(texts):
        tokens = engine.tokenize(text)
        entries += [(t, pos, seq, pos == len(tokens) - 1) for pos, t in enumerate(tokens)]
        last_rows.append(len(entries) - 1)
    engine.decode(entries)
    return last_rows


TEXTS = ["Hello there, how are you", "The quick brown fox", "1 2 3 4 5 6 7"]


def test_logits_rows_follow_the_batch_index(engine):
    rows = prefill(engine, TEXTS)
    for row in rows:
        native = np.ctypeslib.as_array(ll.llama_get_logits_ith(engine.ctx, row), shape=(engine.n_vocab,))
        assert np.array_equal(engine.logits(row), native)


def bias_cases(logits: np.ndarray) -> list[dict[int, float]]:
    order = np.argsort(-logits)
    first, second, third = (int(t) for t in order[:3])
    gap = float(logits[first] - logits[second])
    return [
        {},
        {first: -100},                                  # the raw winner banned
        {first: -100, second: -100},
        {third: 100},                                   # another token boosted past it
        {third: -5, 7: -100},                           # biases that change nothing
        {second: gap},                                  # a tie (or as near as float32 allows): lower id wins
        {second: gap / 2},                              # close, but not enough
        {first: 3.0, second: 50.0},                     # the winner biased up, another more
    ]


@pytest.mark.parametrize("seq", range(len(TEXTS)))
def test_greedy_shortcut_agrees_with_the_native_chain(engine, seq):
    rows = prefill(engine, TEXTS)
    row = rows[seq]
    for bias in bias_cases(engine.logits(row).copy()):
        sampler = engine.new_sampler(SamplingParams(temperature=0, logit_bias=bias))
        try:
            assert sampler._argmax_bias is not None        # the shortcut is what is under test
            native = ll.llama_sampler_sample(sampler.chain, engine.ctx, row)
            assert sampler.sample(row) == native, bias
        finally:
            sampler.free()


def test_saved_sequence_restores_into_another(engine):
    tokens = engine.tokenize(TEXTS[0])
    engine.clear()
    engine.decode([(t, pos, 0, False) for pos, t in enumerate(tokens)])
    state = engine.sequences.save(0)
    assert isinstance(state, bytes) and len(state) > 0
    assert engine.sequences.restore(2, state)
    nxt = engine.tokenize(" again", add_special=False)[0]
    engine.decode([(nxt, len(tokens), 0, True), (nxt, len(tokens), 2, True)])
    assert np.array_equal(engine.logits(0), engine.logits(1))


def test_a_written_bos_is_not_doubled(engine):
    """Chat templates write the BOS text; the tokens carry one BOS, as if it were not written."""
    from tinymodel import BOS_ID
    bos = engine.info.bos_token
    assert engine.tokenize(bos + "Hello there") == engine.tokenize("Hello there")
    assert engine.tokenize(bos + "Hello there")[:2].count(BOS_ID) == 1
    assert engine.tokenize(bos + "Hi", add_special=False)[0] == BOS_ID



# ---- a call grammar woken part-way (engine/lazy_grammar.py) -------------------------------------

CALL_GRAMMAR = 'root ::= "[[" [a-c] [a-c] [a-c] "]]"'


def test_a_call_grammar_sleeps_until_woken_then_holds_every_token(engine):
    row = prefill(engine, TEXTS)[0]
    sampler = engine.new_sampler(SamplingParams(temperature=0, call_grammar=CALL_GRAMMAR))
    try:
        assert sampler.grammar_asleep and not sampler.has_grammar
        assert sampler.sample(row) == int(engine.logits(row).argmax())     # asleep: the plain choice
        assert not sampler.wake(b"", engine.tokenize("[[x", add_special=False))   # it strays already
        assert sampler.grammar_asleep and not sampler.has_grammar
        assert sampler.wake(b"[", engine.tokenize("[a", add_special=False))      # the state after "[[a"
        assert sampler.has_grammar and not sampler.grammar_asleep
        text = "[[a"
        for _ in range(8):
            token = sampler.sample(row)             # the same logits each time: only the grammar moves on
            if token in engine.eog_tokens:
                break
            text += engine.piece(token).decode()
        assert re.fullmatch(r"\[\[a[a-c]{2}\]\]", text), text
        assert token in engine.eog_tokens           # whole: only the end could follow
    finally:
        sampler.free()


def test_a_call_grammar_refuses_a_call_text_that_strays_from_it(engine):
    grammar = 'root ::= "{\\"name\\": " [a-z]+ "}"'
    taken = grammar_after(engine, grammar, b'{"na', engine.tokenize('me": ab', add_special=False))
    assert taken is not None
    ll.llama_sampler_free(taken)
    assert grammar_after(engine, grammar, b"", engine.tokenize('{"name":ab', add_special=False)) is None
    assert grammar_after(engine, grammar, b'{"name', engine.tokenize('": ab', add_special=False)
                         + [engine.eog_tokens[0]]) is None

def test_a_grammar_naming_a_one_character_token_by_id_takes_it(engine):
    """``<[id]>`` of a token whose text is one character (the character's own token): the
    guard against half-and-half tokens found it no spelling and refused it, and so every token
    the grammar allows (a 400 no_allowed_token with no bias at all)."""
    a = engine.tokenize("A", add_special=False)
    assert len(a) == 1 and engine.piece(a[0]) == b"A"
    row = prefill(engine, TEXTS)[0]
    sampler = engine.new_sampler(SamplingParams(temperature=0, grammar=f'root ::= <[{a[0]}]> "B"'))
    try:
        assert sampler._guard is not None and sampler._guard.named == {a[0]}
        assert sampler.sample(row) == a[0]
        assert engine.piece(sampler.sample(row)) == b"B"
        assert sampler.sample(row) in engine.eog_tokens
    finally:
        sampler.free()


# ---- what a load learns of its file, kept for the next load (engine/file_facts.py) -------------

LONG_PIECE = "<|the longest piece in this vocabulary|>"


def test_the_longest_piece_is_scanned_only_for_a_text_longer_than_its_limit(tmp_path):
    """The scan costs one llama.cpp call per token: not at load, and not for a short text."""
    path = write_tiny_gguf(tmp_path / "lazy.gguf", special_tokens=[(LONG_PIECE, "user_defined")])
    engine = Engine(str(path), n_ctx=64, n_seq=1, n_batch=16, threads=1)
    try:
        scanned = ("longest piece", file_facts.file_key(str(path)))
        assert file_facts.known(scanned) is None
        limit = 8
        engine.tokenize("a" * limit, add_special=False, limit=limit)
        assert file_facts.known(scanned) is None
        longest = max(len(engine.piece(t)) for t in range(engine.n_vocab))
        assert longest == len(LONG_PIECE)
        # limit × the longest piece: more bytes than the limit, and as many tokens as it allows
        assert len(engine.tokenize(LONG_PIECE * limit, add_special=False, limit=limit)) == limit
        assert file_facts.known(scanned) == longest
        with pytest.raises(TooManyTokens) as refused:      # one byte more: refused before llama.cpp sees it
            engine.tokenize("a" * (limit * longest + 1), add_special=False, limit=limit)
        assert refused.value.at_least == limit + 1
    finally:
        engine.close()


def test_a_second_load_of_the_same_file_reuses_what_the_first_learned(tmp_path):
    path = write_tiny_gguf(tmp_path / "again.gguf")

    def load() -> Engine:
        return Engine(str(path), n_ctx=64, n_seq=1, n_batch=16, threads=1)

    first = load()
    first.close()
    second = load()
    second.close()
    assert first.warmup_seconds > 0 and second.warmup_seconds == 0.0
    assert second.weight_plan is first.weight_plan          # not asked of ggml again
    assert second.eog_tokens == first.eog_tokens
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))   # a changed file is a new one
    third = load()
    third.close()
    assert third.weight_plan is not first.weight_plan and third.warmup_seconds > 0


def test_a_sampler_takes_the_named_tokens_its_grammar_was_checked_for(engine, monkeypatch):
    grammar = 'root ::= "a" <|im_start|> "b"'
    named = engine.check_grammar(grammar)       # on the connection thread, as the request is read
    assert named == {engine.tokenize("<|im_start|>", add_special=False)[0]}
    scans = []
    monkeypatch.setattr(engine, "grammar_tokens", lambda text: scans.append(text) or frozenset())
    sampler = engine.new_sampler(SamplingParams(temperature=0, grammar=grammar, grammar_tokens=named))
    try:
        assert scans == [], "the runtime thread scanned the grammar again"
        assert sampler._guard is not None and sampler._guard.named == named
    finally:
        sampler.free()


def test_a_sampler_that_fails_to_build_frees_its_chain(engine, monkeypatch):
    freed = []
    real_free = ll.llama_sampler_free
    monkeypatch.setattr(ll, "llama_sampler_free", lambda chain: freed.append(chain) or real_free(chain))
    # llama.cpp parses it; naming an end-of-generation token is refused after the chain is built
    with pytest.raises(GrammarError):
        engine.new_sampler(SamplingParams(temperature=0.5, top_k=5, seed=1, grammar='root ::= "hi" <|im_end|>'))
    assert len(freed) == 1
