"""A tool call's grammar started part-way through the output: strict tools under tool_choice auto.

The model writes freely until it opens a call of its own; from that call's first marker on, the
call's grammar holds every token, as llama-server's lazy grammars do. llama.cpp's own lazy
sampler (llama_sampler_init_grammar_lazy_patterns) wakes on a regex over the raw output and
replays the tokens that matched into the grammar, where a token the grammar cannot take aborts
the process; and a regex cannot know what our text stages know (a marker inside reasoning is
no call, a `{` opens a call only at the message's start). So the text pipeline says where a call
opens (runtime/call_wake.py), and here a fresh grammar sampler takes the call's text so far,
each token checked before it is accepted, and becomes the job's grammar from then on.
"""

from __future__ import annotations

from collections.abc import Sequence

from llama_cpp import llama_cpp as ll

from .candidates import CandidateBuffer
from .facade import GrammarError


def grammar_after(engine, grammar: str, lead: bytes, tokens: Sequence[int]):
    """A grammar sampler for `grammar` that has taken the call's text so far, or None when that
    text strays from the grammar (the token that completed the marker ran on past what it allows).

    The text is `lead`, the tail of a token the call began inside (spelled here with tokens of
    its own), then the model's own `tokens`. `engine`: tokenize, piece, vocab, eog_tokens (a
    sampler.SamplingContext)."""
    spelled = _spelling(engine, lead)
    if spelled is None:
        return None
    sampler = ll.llama_sampler_init_grammar(engine.vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise GrammarError("the tool-call grammar could not be parsed by llama.cpp")
    probe = CandidateBuffer(1)
    for token in [*spelled, *tokens]:
        probe.fill_one(token)
        ll.llama_sampler_apply(sampler, probe.ref)
        if token in engine.eog_tokens or probe.logit(0) == float("-inf"):
            ll.llama_sampler_free(sampler)
            return None
        ll.llama_sampler_accept(sampler, token)     # legal, and a call grammar names no token: cannot throw
    return sampler


def _spelling(engine, text: bytes) -> list[int] | None:
    """Tokens whose pieces are exactly `text`, or None (a tokenizer may add or fold a space)."""
    if not text:
        return []
    try:
        tokens = engine.tokenize(text.decode("utf-8"), add_special=False, parse_special=True)
    except UnicodeDecodeError:
        return None
    return tokens if b"".join(engine.piece(t) for t in tokens) == text else None
