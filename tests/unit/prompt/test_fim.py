"""The FIM prompt builder: exact token sequences for each layout, and what is trimmed."""

from __future__ import annotations

import pytest

from localserve.engine.facade import FimTokens, TooManyTokens
from localserve.errors import ApiError
from localserve.prompt.fim import (FIM_ANSWER_RESERVE, ExtraFile, FimInput, NoFimTokens, build_fim_prompt,
                                   fim_stop_strings)

BOS, PRE, SUF, MID, PAD, REP, SEP = 1, 1001, 1002, 1003, 1004, 1005, 1006
NAMES = {BOS: "<s>", PRE: "<PRE>", SUF: "<SUF>", MID: "<MID>", PAD: "<PAD>", REP: "<REP>", SEP: "<SEP>"}


class CharEngine:
    """One token per character (its code point): sequences read back as text."""

    max_piece_bytes = 1

    def __init__(self, fim: FimTokens, n_ctx: int = 4096, prompt_start=(BOS,)):
        self.fim = fim
        self.n_ctx = n_ctx
        self.prompt_start = list(prompt_start)
        self.calls: list[tuple[str, bool, bool]] = []

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True, limit=None):
        self.calls.append((text, add_special, parse_special))
        if limit is not None and len(text) > limit:
            raise TooManyTokens(limit + 1)
        return [ord(c) for c in text]

    def piece(self, token: int) -> bytes:
        return NAMES.get(token, chr(token)).encode()


def read(tokens: list[int]) -> str:
    return "".join(NAMES.get(t, chr(t)) for t in tokens)


BASIC = FimTokens(pre=PRE, suf=SUF, mid=MID, pad=PAD)
REPO = FimTokens(pre=PRE, suf=SUF, mid=MID, pad=PAD, rep=REP, sep=SEP)


def test_prefix_suffix_middle_in_the_models_order():
    tokens = build_fim_prompt(CharEngine(BASIC), FimInput(prefix="def f(", suffix="):\n"))
    assert tokens == [BOS, PRE, *map(ord, "def f("), SUF, *map(ord, "):\n"), MID]


def test_prompt_continues_the_prefix():
    tokens = build_fim_prompt(CharEngine(BASIC), FimInput(prefix="a\n", suffix="\nz", prompt="  b"))
    assert read(tokens) == "<s><PRE>a\n  b<SUF>\nz<MID>"


def test_suffix_first_order():
    tokens = build_fim_prompt(CharEngine(BASIC), FimInput(prefix="ab", suffix="yz", prompt="c", suffix_first=True))
    assert read(tokens) == "<s><SUF>yz<PRE>abc<MID>"


def test_no_bos_when_the_model_adds_none():
    tokens = build_fim_prompt(CharEngine(BASIC, prompt_start=()), FimInput(prefix="a", suffix="b"))
    assert read(tokens) == "<PRE>a<SUF>b<MID>"


def test_extra_files_in_the_repository_layout_come_first():
    fim_input = FimInput(prefix="p", suffix="s", extra=[ExtraFile("a.py", "A\n"), ExtraFile("b.py", "B\n")],
                         project="proj", filename="c.py")
    tokens = build_fim_prompt(CharEngine(REPO), fim_input)
    assert read(tokens) == "<s><REP>proj\n<SEP>a.py\nA\n<SEP>b.py\nB\n<SEP>c.py\n<PRE>p<SUF>s<MID>"


def test_extra_files_without_repository_tokens_are_snippets():
    fim_input = FimInput(prefix="p", suffix="s", extra=[ExtraFile("a.py", "A"), ExtraFile("b.py", "B")])
    tokens = build_fim_prompt(CharEngine(BASIC), fim_input)
    assert read(tokens) == "<s>\n\n--- snippet ---\n\nA\n\n--- snippet ---\n\nB<PRE>p<SUF>s<MID>"


def test_no_repository_header_without_extra_files():
    tokens = build_fim_prompt(CharEngine(REPO), FimInput(prefix="p", suffix="s"))
    assert read(tokens) == "<s><PRE>p<SUF>s<MID>"


def test_a_keystroke_changes_only_what_follows_the_extra_context():
    engine = CharEngine(REPO)
    extra = [ExtraFile("a.py", "x = 1\n" * 20)]
    before = build_fim_prompt(engine, FimInput(prefix="def f():\n", suffix="\n", prompt="  re", extra=extra))
    after = build_fim_prompt(engine, FimInput(prefix="def f():\n", suffix="\n", prompt="  ret", extra=extra))
    shared = next(i for i, (a, b) in enumerate(zip(before, after)) if a != b)
    assert read(before[:shared]).endswith("<PRE>def f():\n  re")     # extra, prefix and typed text stay


def test_typing_in_the_prompt_keeps_a_trimmed_prefix_as_it_was():
    engine = CharEngine(BASIC, n_ctx=100)
    prefix, suffix = "".join(chr(65 + i % 26) for i in range(300)), "z" * 300
    before = build_fim_prompt(engine, FimInput(prefix=prefix, suffix=suffix, prompt="x"), answer_tokens=20)
    after = build_fim_prompt(engine, FimInput(prefix=prefix, suffix=suffix, prompt="xyz"), answer_tokens=20)
    assert before[:before.index(SUF) - 1] == after[:after.index(SUF) - 3]     # up to the typed text
    assert len(before) == len(after) == 100 - 20                            # the suffix gave way


def test_user_text_never_becomes_special_tokens():
    engine = CharEngine(BASIC)
    build_fim_prompt(engine, FimInput(prefix="<PRE>", suffix="x", prompt="y",
                                      extra=[ExtraFile("f", "<|fim_middle|>")]))
    assert engine.calls and all(not add and not parse for _, add, parse in engine.calls)


def test_a_small_context_keeps_the_end_of_the_prefix_and_the_start_of_the_suffix():
    n_ctx = 100
    engine = CharEngine(BASIC, n_ctx=n_ctx)
    tokens = build_fim_prompt(engine, FimInput(prefix="P" * 500 + "<", suffix=">" + "S" * 500),
                              answer_tokens=20)
    window = n_ctx - 20 - 4                     # the answer, BOS and the three FIM tokens
    text = read(tokens)
    kept_prefix = text[len("<s><PRE>"):text.index("<SUF>")]
    kept_suffix = text[text.index("<SUF>") + 5:text.index("<MID>")]
    assert kept_prefix == "P" * (window * 3 // 4 - 1) + "<"
    assert kept_suffix == ">" + "S" * (window - len(kept_prefix) - 1)
    assert len(tokens) == n_ctx - 20


def test_extra_context_gets_what_is_left_and_keeps_its_end():
    engine = CharEngine(BASIC, n_ctx=64)
    fim_input = FimInput(prefix="p", suffix="s", extra=[ExtraFile("f", "0123456789" * 10)])
    tokens = build_fim_prompt(engine, fim_input, answer_tokens=16)
    room = (64 - 16 - 4) // 2               # half of what the answer, BOS and FIM tokens leave
    assert read(tokens) == "<s>" + ("0123456789" * 10)[-room:] + "<PRE>p<SUF>s<MID>"


def test_the_extra_context_is_cut_the_same_way_whatever_the_cursor_text():
    engine = CharEngine(BASIC, n_ctx=64)
    extra = [ExtraFile("f", "0123456789" * 10)]
    short = build_fim_prompt(engine, FimInput(prefix="p", suffix="s", extra=extra), answer_tokens=16)
    long = build_fim_prompt(engine, FimInput(prefix="p" * 30, suffix="s" * 30, prompt="x" * 5, extra=extra),
                            answer_tokens=16)
    assert short[:short.index(PRE)] == long[:long.index(PRE)]
    assert len(long) == 64 - 16


def test_the_default_answer_reserve():
    engine = CharEngine(BASIC, n_ctx=FIM_ANSWER_RESERVE + 10)
    tokens = build_fim_prompt(engine, FimInput(prefix="p" * 50, suffix=""))
    assert len(tokens) == 10


def test_a_model_without_fim_tokens():
    with pytest.raises(NoFimTokens) as caught:
        build_fim_prompt(CharEngine(FimTokens(pre=PRE)), FimInput(prefix="a", suffix="b"))
    assert caught.value.missing == ["suf", "mid"]
    assert "suffix, middle" in str(caught.value)


def test_stop_strings_are_the_other_fim_sections():
    assert fim_stop_strings(CharEngine(REPO)) == ["<PRE>", "<SUF>", "<MID>"]


def test_no_more_text_is_tokenized_than_the_context_could_hold():
    engine = CharEngine(BASIC, n_ctx=50)
    extra = [ExtraFile("old", "o" * 1000), ExtraFile("new", "n" * 30)]
    build_fim_prompt(engine, FimInput(prefix="p" * 10_000, suffix="s" * 10_000, extra=extra), answer_tokens=10)
    assert max(len(text) for text, _, _ in engine.calls) <= 50
    # the names count too: 50 less "new" and 30 characters, less "old"
    assert ("n" * 30, False, False) in engine.calls and ("o" * 14, False, False) in engine.calls


def test_filenames_count_in_what_the_context_could_hold():
    """A name is tokenized whole, so a file whose name does not fit what is left is not read at all
    (a 25 MB name once cost seconds of tokenizing and a gigabyte)."""
    engine = CharEngine(REPO, n_ctx=200)
    extra = [ExtraFile(f"{i}" + "f" * 1000, "old") for i in range(100)] + [ExtraFile("a.py", "A" * 20)]
    tokens = build_fim_prompt(engine, FimInput(prefix="p", suffix="s", extra=extra), answer_tokens=0)
    assert not any("f" * 100 in text for text, _, _ in engine.calls)
    assert read(tokens) == f"<s><REP>myproject\n<SEP>a.py\n{'A' * 20}<SEP>filename\n<PRE>p<SUF>s<MID>"


def test_a_prompt_longer_than_the_context_is_context_length_exceeded():
    with pytest.raises(ApiError) as caught:
        build_fim_prompt(CharEngine(BASIC, n_ctx=50), FimInput(prefix="", suffix="", prompt="x" * 60))
    assert caught.value.code == "context_length_exceeded"
