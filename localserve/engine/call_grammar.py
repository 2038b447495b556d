"""A tool call's grammar started part-way through the output: strict tools under tool_choice auto.

The model writes freely until it opens a call of its own; from that call's first marker on, the
call's grammar holds every token, as llama-server's lazy grammars do. llama.cpp's own lazy
sampler (llama_sampler_init_grammar_lazy_patterns) wakes on a regex over the raw output and
replays the tokens that matched into the grammar, where a token the grammar cannot take aborts
the process; and a regex cannot know what our text stages know (a marker inside reasoning is
no call, a `{` opens a call only at the message's start). So the text pipeline says where a call
opens (runtime/call_grammar.py), and here a fresh grammar sampler takes the call's text so far,
each token checked before it is accepted, and becomes the job's grammar from then on.
"""

from __future__ import annotations

from llama_cpp import llama_cpp as ll

from .candidates import CandidateBuffer
from .facade import GrammarError


def grammar_after(engine, grammar: str, text: str):
    """A grammar sampler for `grammar` that has taken `text`, or None when `text` already strays
    from the grammar (the token that completed the marker went on past what it allows).

    `engine`: tokenize, vocab, eog_tokens (a sampler.SamplingContext). The text is taken as
    tokens, special ones included: the grammar reads a token by its text, so any spelling of
    the same text leaves it in the same state."""
    sampler = ll.llama_sampler_init_grammar(engine.vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise GrammarError("the tool-call grammar could not be parsed by llama.cpp")
    probe = CandidateBuffer(1)
    for token in engine.tokenize(text, add_special=False, parse_special=True):
        probe.fill_one(token)
        ll.llama_sampler_apply(sampler, probe.ref)
        if token in engine.eog_tokens or probe.logit(0) == float("-inf"):
            ll.llama_sampler_free(sampler)
            return None
        ll.llama_sampler_accept(sampler, token)     # legal, and a call grammar names no token: cannot throw
    return sampler
