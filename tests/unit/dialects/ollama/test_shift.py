"""Ollama's truncate and shift without a model: the cut of a prompt longer than the context (its
first num_keep tokens after the BOS, the newest after them, half the context left), and the
history's last message cut when even it alone does not fit."""

from __future__ import annotations

import pytest

from localserve.conversation import text_message
from localserve.dialects.ollama.truncation import cut_to_fit, newest_that_fit, prompt_keep
from localserve.generation import ContextOverflow


def test_the_cut_keeps_the_head_and_the_newest_leaving_half_the_context():
    tokens = list(range(1000))
    cut = cut_to_fit(tokens, 256, 5)
    assert len(cut) == 256 - (256 - 5) // 2 == 131        # llm/llama_server.go contextShiftPromptLimit
    assert cut[:5] == [0, 1, 2, 3, 4] and cut[5:] == tokens[1000 - 126:]
    assert cut_to_fit(tokens, 256, None) == tokens[:255]     # num_keep -1: as much of the head as fits
    assert cut_to_fit(tokens, 256, 0) == tokens[1000 - 128:]


def test_num_keep_counts_after_the_bos():
    assert prompt_keep(4, 1) == 5 and prompt_keep(4, 0) == 4 and prompt_keep(-1, 1) is None


def measured(n_ctx: int):
    def build(messages):
        used = sum(len(m.parts[0].text) for m in messages)
        if used >= n_ctx:
            raise ContextOverflow(used, n_ctx)
        return messages
    return build


def test_a_last_message_too_long_alone_is_cut_with_shift_else_the_overflow():
    messages = [text_message("system", "s" * 5), text_message("user", "u" * 50), text_message("assistant", "a"),
                text_message("user", "x" * 200)]
    cut_from = []

    def cut_last(kept):
        cut_from.append([m.role for m in kept])
        return "cut"

    assert newest_that_fit(messages, measured(100), True, lambda: None, "t", cut_last=cut_last) == "cut"
    assert cut_from == [["system", "user"]]            # the system message and the last one
    with pytest.raises(ContextOverflow):
        newest_that_fit(messages, measured(100), True, lambda: None, "t")
    with pytest.raises(ContextOverflow):               # truncate false: nothing is dropped or cut
        newest_that_fit(messages, measured(100), False, lambda: None, "t", cut_last=cut_last)
    assert newest_that_fit(messages[-1:], measured(100), True, lambda: None, "t", cut_last=cut_last) == "cut"


def test_a_shifting_job_without_a_limit_ends_at_ten_contexts():
    from localserve.dialects.ollama.chat import shifting
    from localserve.generation import GenerationRequest
    unlimited = shifting(GenerationRequest(prompt_tokens=[1, 2, 3]), True, 5, n_ctx=256)
    assert unlimited.context_shift == 5 and unlimited.max_tokens == 2560
    long = shifting(GenerationRequest(prompt_tokens=[1, 2, 3], max_tokens=10**6), True, None, n_ctx=256)
    assert long.context_shift == 3 and long.max_tokens == 2560
    assert shifting(GenerationRequest(prompt_tokens=[1], max_tokens=7), True, 5, n_ctx=256).max_tokens == 7
    assert shifting(GenerationRequest(prompt_tokens=[1]), False, 5, n_ctx=256).max_tokens is None
