"""The tiny GGUF models of tests/support/tinymodel.py run in the real llama.cpp engine.

Everything here goes through llama-cpp-python's low-level bindings, so it also
records how llama.cpp (as vendored by llama-cpp-python 0.3.36) tokenizes,
detokenizes and applies GBNF grammars with special tokens.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import llama_cpp as L
import pytest

from tinymodel import (  # tests/support/
    BOS_ID,
    BYTE_TOKEN_OFFSET,
    CHAT_CONTROL_TOKENS,
    CHATML_TEMPLATE,
    EOS_ID,
    UNK_ID,
    byte_token_id,
    tiny_vocab,
    token_ids,
    write_tiny_gguf,
)

SPECIALS = (
    "<tool_call>",
    "</tool_call>",
    ("<think>", "user_defined"),
    ("</think>", "user_defined"),
    "[TOOL_CALLS]",
    "<|python_tag|>",
)
IDS = token_ids(SPECIALS)


@L.llama_log_callback
def _quiet_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    pass


@pytest.fixture(autouse=True, scope="module")
def _silence_llama_log():
    L.llama_log_set(_quiet_log, ctypes.c_void_p(0))
    yield
    from llama_cpp import _logger

    L.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


class Engine:
    """A model and a context, driven through the C API."""

    def __init__(self, path: Path, n_ctx: int = 256) -> None:
        self.model = L.llama_model_load_from_file(os.fsencode(path), L.llama_model_default_params())
        assert self.model, "model failed to load"
        params = L.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_ctx
        params.n_threads = params.n_threads_batch = 2
        self.ctx = L.llama_init_from_model(self.model, params)
        assert self.ctx, "context failed to initialise"
        self.vocab = L.llama_model_get_vocab(self.model)

    def close(self) -> None:
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

    def tokenize(self, text: str, *, add_special: bool = False, parse_special: bool = False) -> list[int]:
        data = text.encode()
        n_max = len(data) + 2
        buf = (L.llama_token * n_max)()
        n = L.llama_tokenize(self.vocab, data, len(data), buf, n_max, add_special, parse_special)
        assert n >= 0
        return list(buf[:n])

    def piece(self, token: int, *, special: bool = False) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        assert n >= 0
        return buf.raw[:n]

    def detokenize(self, tokens: list[int], *, special: bool = False) -> str:
        arr = (L.llama_token * len(tokens))(*tokens)
        buf = ctypes.create_string_buffer(4096)
        n = L.llama_detokenize(self.vocab, arr, len(tokens), buf, len(buf), False, special)
        assert n >= 0
        return buf.raw[:n].decode()

    def decode(self, tokens: list[int]) -> None:
        arr = (L.llama_token * len(tokens))(*tokens)
        assert L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(tokens))) == 0

    def generate(
        self,
        grammar: str | None = None,
        *,
        prompt: str = "Hello",
        logit_bias: dict[int, float] | None = None,
        max_tokens: int = 48,
    ) -> tuple[list[int], int | None]:
        """Greedy generation; returns (tokens before end-of-generation, the EOG token or None)."""
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        chain = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        try:
            if logit_bias:
                biases = (L.llama_logit_bias * len(logit_bias))(
                    *(L.llama_logit_bias(t, b) for t, b in logit_bias.items())
                )
                L.llama_sampler_chain_add(
                    chain,
                    L.llama_sampler_init_logit_bias(L.llama_vocab_n_tokens(self.vocab), len(logit_bias), biases),
                )
            if grammar is not None:
                smpl = L.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
                if not smpl:
                    raise ValueError(f"grammar rejected: {grammar!r}")
                L.llama_sampler_chain_add(chain, smpl)
            L.llama_sampler_chain_add(chain, L.llama_sampler_init_greedy())

            self.decode(self.tokenize(prompt, add_special=True))
            out: list[int] = []
            for _ in range(max_tokens):
                token = L.llama_sampler_sample(chain, self.ctx, -1)  # also accepts it
                if L.llama_vocab_is_eog(self.vocab, token):
                    return out, token
                out.append(token)
                self.decode([token])
            return out, None
        finally:
            L.llama_sampler_free(chain)

    def text(self, tokens: list[int]) -> bytes:
        return b"".join(self.piece(t, special=True) for t in tokens)


@pytest.fixture
def model_path(tmp_path: Path) -> Path:
    return write_tiny_gguf(tmp_path / "tiny.gguf", special_tokens=SPECIALS, chat_template=CHATML_TEMPLATE)


@pytest.fixture
def engine(model_path: Path):
    eng = Engine(model_path)
    yield eng
    eng.close()


# --- 1. loads and decodes -------------------------------------------------------


def test_file_is_small(model_path: Path) -> None:
    assert model_path.stat().st_size < 700_000


def test_model_loads_and_decodes(engine: Engine) -> None:
    assert L.llama_model_n_params(engine.model) > 0
    assert L.llama_model_n_ctx_train(engine.model) == 2048
    assert L.llama_model_n_embd(engine.model) == 64
    assert L.llama_vocab_n_tokens(engine.vocab) == len(tiny_vocab(SPECIALS))

    engine.decode(engine.tokenize("Hello, world! This is a test.", add_special=True))
    logits = L.llama_get_logits_ith(engine.ctx, -1)
    row = [logits[i] for i in range(L.llama_vocab_n_tokens(engine.vocab))]
    assert all(abs(x) < 100 for x in row)
    assert max(row) - min(row) > 1.0  # random weights, but not degenerate


def test_metadata_is_what_was_written(tmp_path: Path, engine: Engine) -> None:
    assert L.llama_model_chat_template(engine.model, None).decode() == CHATML_TEMPLATE
    assert L.llama_vocab_bos(engine.vocab) == BOS_ID
    assert L.llama_vocab_eos(engine.vocab) == EOS_ID
    for i, (text, _score, _type) in enumerate(tiny_vocab(SPECIALS)):
        assert L.llama_vocab_get_text(engine.vocab, i).decode() == text

    other = Engine(write_tiny_gguf(tmp_path / "b.gguf", context_length=512, n_layer=1, n_head=2))
    try:
        assert L.llama_model_n_ctx_train(other.model) == 512
        assert L.llama_model_chat_template(other.model, None) is None
    finally:
        other.close()


def test_token_id_layout() -> None:
    vocab = tiny_vocab()
    assert [t for t, _, _ in vocab[:3]] == ["<unk>", "<s>", "</s>"]
    assert (UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2)
    assert [t for t, _, _ in vocab[3:BYTE_TOKEN_OFFSET]] == list(CHAT_CONTROL_TOKENS)
    assert vocab[byte_token_id(0x00)][0] == "<0x00>"
    assert vocab[byte_token_id(0xFF)][0] == "<0xFF>"
    assert vocab[BYTE_TOKEN_OFFSET + 256][0] == "▁"
    # the caller's special tokens go last, and do not move anything else
    with_specials = tiny_vocab(SPECIALS)
    assert with_specials[: len(vocab)] == vocab
    assert [t for t, _, _ in with_specials[len(vocab):]] == [s if isinstance(s, str) else s[0] for s in SPECIALS]
    assert 300 < len(with_specials) < 600


def test_eog_tokens(engine: Engine) -> None:
    eog = {i for i in range(L.llama_vocab_n_tokens(engine.vocab)) if L.llama_vocab_is_eog(engine.vocab, i)}
    assert eog == {IDS[t] for t in ("</s>", "<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|endoftext|>", "<|end|>")}


# --- 2. tokenize / detokenize ---------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["Hello, world!", "the name is {\"name\": \"x\", \"arguments\": {}}", "  two  spaces\n\ttab~", "héllo 世界", "emoji 🦙!"],
)
def test_round_trip(engine: Engine, text: str) -> None:
    tokens = engine.tokenize(text)
    assert engine.detokenize(tokens) == text
    assert b"".join(engine.piece(t) for t in tokens) == text.encode()
    with_bos = engine.tokenize(text, add_special=True)
    assert with_bos == [BOS_ID] + tokens


def test_spm_merges_and_byte_fallback(engine: Engine) -> None:
    assert engine.tokenize("Hello world") == [IDS["Hello"], IDS["▁world"]]
    assert engine.tokenize('{"name":') == [IDS['{"'], IDS["name"], IDS['":']]
    # é is not a piece: it falls back to its two UTF-8 bytes
    assert engine.tokenize("é") == [byte_token_id(0xC3), byte_token_id(0xA9)]
    assert engine.tokenize("\n") == [byte_token_id(0x0A)]


# --- 3. special tokens ------------------------------------------------------------


@pytest.mark.parametrize("text", ["<tool_call>", "</tool_call>", "<think>", "</think>", "[TOOL_CALLS]", "<|python_tag|>", "<|im_start|>", "<|im_end|>"])
def test_special_token_is_one_token(engine: Engine, text: str) -> None:
    assert engine.tokenize(text, parse_special=True) == [IDS[text]]
    assert engine.piece(IDS[text], special=True) == text.encode()


def test_control_versus_user_defined(engine: Engine) -> None:
    # CONTROL tokens: only parsed with parse_special, only rendered with special=True
    assert engine.tokenize("<tool_call>", parse_special=False) != [IDS["<tool_call>"]]
    assert engine.piece(IDS["<tool_call>"], special=False) == b""
    # USER_DEFINED tokens: always parsed and always rendered
    assert engine.tokenize("<think>", parse_special=False) == [IDS["<think>"]]
    assert engine.piece(IDS["<think>"], special=False) == b"<think>"
    text = "<|im_start|>user\nhi<|im_end|>"
    tokens = engine.tokenize(text, parse_special=True)
    assert tokens[0] == IDS["<|im_start|>"] and tokens[-1] == IDS["<|im_end|>"]
    assert engine.detokenize(tokens, special=True) == text
    assert engine.detokenize(tokens, special=False) == "user\nhi"


# --- 4. and 5. grammars ------------------------------------------------------------


def test_grammar_forces_text(engine: Engine) -> None:
    tokens, eog = engine.generate('root ::= "Hello, world!"')
    assert engine.text(tokens) == b"Hello, world!"
    assert eog is not None  # once the grammar is complete only EOG tokens are allowed


def test_grammar_forces_multibyte_character(engine: Engine) -> None:
    tokens, eog = engine.generate('root ::= "é"')
    assert tokens == [byte_token_id(0xC3), byte_token_id(0xA9)]
    assert engine.text(tokens).decode() == "é"
    assert eog is not None


def test_grammar_token_syntax_forces_special_token(engine: Engine) -> None:
    # <text> in a grammar is the single token whose text that is; even when the
    # model strongly prefers spelling it out in characters.
    push_chars = {IDS["<"]: 50.0, IDS["/"]: 50.0}
    tokens, _ = engine.generate('root ::= <tool_call> "{}" </tool_call>', logit_bias=push_chars)
    assert tokens[0] == IDS["<tool_call>"] and tokens[-1] == IDS["</tool_call>"]
    assert engine.text(tokens) == b"<tool_call>{}</tool_call>"

    tokens, _ = engine.generate('root ::= <think> "hm" </think>', logit_bias=push_chars)
    assert tokens[0] == IDS["<think>"] and tokens[-1] == IDS["</think>"]

    tokens, _ = engine.generate('root ::= <|python_tag|> "x"', logit_bias=push_chars)
    assert tokens[0] == IDS["<|python_tag|>"]


def test_grammar_token_id_syntax(engine: Engine) -> None:
    # <[id]> works for any token, including ones whose text does not look like <...>
    tokens, _ = engine.generate(f'root ::= <[{IDS["[TOOL_CALLS]"]}]> "[]"', logit_bias={IDS["["]: 50.0})
    assert tokens[0] == IDS["[TOOL_CALLS]"]
    assert engine.text(tokens) == b"[TOOL_CALLS][]"


def test_grammar_string_literal_matches_special_token_or_characters(engine: Engine) -> None:
    # The grammar sees every token as its special=True piece, so "<tool_call>" as a
    # string literal is satisfied by the control token OR by its characters.
    grammar = 'root ::= "<tool_call>" "{}"'
    tokens, _ = engine.generate(grammar, logit_bias={IDS["<tool_call>"]: 50.0})
    assert tokens[0] == IDS["<tool_call>"]
    tokens, _ = engine.generate(grammar, logit_bias={IDS["<tool_call>"]: -1e9, IDS["<"]: 50.0})
    assert IDS["<tool_call>"] not in tokens and tokens[0] == IDS["<"]
    assert engine.text(tokens) == b"<tool_call>{}"


def test_grammar_bracket_token_text_is_a_character_class(engine: Engine) -> None:
    # [TOOL_CALLS] bare is a character class (one of T O L _ C A S), not a token,
    # and <[TOOL_CALLS]> is a parse error: use <[id]> or the string literal.
    tokens, _ = engine.generate('root ::= [TOOL_CALLS] "[]"')
    assert engine.text(tokens)[:1] in b"TOL_CAS" and engine.text(tokens)[1:] == b"[]"
    with pytest.raises(ValueError):
        engine.generate('root ::= <[TOOL_CALLS]> "x"')


def test_grammar_unknown_token_is_rejected(engine: Engine) -> None:
    with pytest.raises(ValueError):
        engine.generate('root ::= <nosuch> "x"')


def test_grammar_negated_token(engine: Engine) -> None:
    tokens, _ = engine.generate('root ::= !<tool_call> "x"', logit_bias={IDS["<tool_call>"]: 50.0})
    assert tokens[0] != IDS["<tool_call>"] and engine.text(tokens).endswith(b"x")


def test_grammar_string_literal_never_matches_eog_token(engine: Engine) -> None:
    # EOG tokens are masked while the grammar is incomplete, so "<|im_end|>" as a
    # literal is spelled out in characters, followed by a real EOG token.
    tokens, eog = engine.generate('root ::= "hi" "<|im_end|>"', logit_bias={IDS["<|im_end|>"]: 50.0})
    assert IDS["<|im_end|>"] not in tokens
    assert engine.text(tokens) == b"hi<|im_end|>"
    assert eog == IDS["<|im_end|>"]


def test_eog_token_in_grammar_kills_the_process(model_path: Path) -> None:
    # An EOG token referenced as <|im_end|> can never be sampled (EOG is masked
    # until the grammar is complete): every candidate is rejected, greedy picks
    # token 0 and accepting it throws a C++ exception that aborts the process.
    script = textwrap.dedent(
        f"""
        import ctypes, sys
        sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).resolve().parents[1] / 'support')!r}]
        import llama_cpp as L
        from test_tinymodel import Engine, _quiet_log
        L.llama_log_set(_quiet_log, ctypes.c_void_p(0))
        eng = Engine({str(model_path)!r})
        eng.generate('root ::= "hi" <|im_end|>', max_tokens=5)
        print("survived")
        """
    )
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode != 0
    assert "survived" not in proc.stdout
    assert "Unexpected empty grammar stack" in proc.stderr


def test_same_seed_same_model(tmp_path: Path) -> None:
    a = write_tiny_gguf(tmp_path / "a.gguf", seed=1).read_bytes()
    b = write_tiny_gguf(tmp_path / "b.gguf", seed=1).read_bytes()
    c = write_tiny_gguf(tmp_path / "c.gguf", seed=2).read_bytes()
    assert a == b != c


def test_extra_metadata_overrides(tmp_path: Path) -> None:
    path = write_tiny_gguf(
        tmp_path / "m.gguf",
        extra_metadata={"general.name": "renamed", "tokenizer.ggml.add_space_prefix": None},
    )
    eng = Engine(path)
    try:
        buf = ctypes.create_string_buffer(64)
        n = L.llama_model_meta_val_str(eng.model, b"general.name", buf, len(buf))
        assert buf.raw[:n] == b"renamed"
        # without the key, SPM's default applies: a "▁" is put in front of the text
        assert eng.tokenize("Hello") == [IDS["▁Hello"]]
    finally:
        eng.close()
