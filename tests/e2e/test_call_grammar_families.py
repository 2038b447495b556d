"""Every tool-call family that a grammar can force can also be woken part-way (strict tools under
tool_choice auto): where the family's parser sees a call open, the text so far is a state of the
family's call grammar, and the whole call as the grammar writes it is one too. Runs over
TOOL_SYNTAXES, so a family added later is checked as it lands."""

from __future__ import annotations

import json

import pytest
from llama_cpp import llama_cpp as ll

from localserve.engine.call_grammar import grammar_after
from localserve.engine.engine import Engine
from localserve.grammar.grammar import tool_call_grammar
from localserve.parsing.tool_families import TOOL_SYNTAXES
from localserve.parsing.tools import ToolProjector
from localserve.runtime.call_grammar import grammar_follows
from tinymodel import BYTE_TOKEN_OFFSET, write_tiny_gguf

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"name": "get_weather", "parameters": SCHEMA}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("families") / "tiny.gguf")
    eng = Engine(str(path), n_ctx=256, n_seq=1, n_batch=64, threads=1)
    yield eng
    eng.close()


def written_call(syntax: str) -> str:
    """One call of get_weather(city="Paris") as the family's grammar writes it."""
    shape = TOOL_SYNTAXES[syntax].grammar
    arguments = "<parameter=city>\nParis\n</parameter>\n" if shape.parameters else '{"city": "Paris"}'
    before = shape.before.format(name="get_weather", jname=json.dumps("get_weather"))
    return shape.opening + before + arguments + shape.after + shape.closing


def opened_text(syntax: str, text: str) -> str:
    """The call's text where the projector first reports it open, fed one character at a time."""
    projector = ToolProjector(syntax, {"get_weather": SCHEMA})
    for char in text:
        projector.feed(char)
        if projector.open_call is not None:
            return projector.open_call.text
    raise AssertionError(f"{syntax}: no call opened in {text!r}")


def takes(engine, grammar: str, text: str) -> bool:
    """Whether the grammar takes the text, written as the tiny vocabulary's byte tokens (the
    grammar reads a token by its text, so any spelling will do)."""
    sampler = grammar_after(engine, grammar, b"", [BYTE_TOKEN_OFFSET + b for b in text.encode()])
    if sampler is None:
        return False
    ll.llama_sampler_free(sampler)
    return True


@pytest.mark.parametrize("syntax", sorted(TOOL_SYNTAXES))
def test_a_call_wakes_its_grammar_where_it_opens(engine, syntax):
    grammar = tool_call_grammar(syntax, TOOLS, parallel=True)
    call = written_call(syntax)
    opened = opened_text(syntax, call)
    assert call.startswith(opened)
    assert takes(engine, grammar, opened), opened
    assert takes(engine, grammar, call), call
    assert not takes(engine, grammar, opened + "\x01")      # the check can refuse


FOLLOWED = [(name, marker) for name, syntax in sorted(TOOL_SYNTAXES.items()) for marker in syntax.starts
            if grammar_follows(syntax, marker)]


@pytest.mark.parametrize(("syntax", "marker"), FOLLOWED)
def test_a_call_after_a_marker_its_grammar_does_not_write_wakes_after_it(engine, syntax, marker):
    grammar = tool_call_grammar(syntax, TOOLS, parallel=True)
    call = written_call(syntax)
    opened = opened_text(syntax, marker + call)
    assert opened.startswith(marker)
    assert not takes(engine, grammar, opened)
    assert takes(engine, grammar, opened[len(marker):])
