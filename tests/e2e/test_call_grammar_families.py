"""Every tool-call family that a grammar can force can also be woken part-way (strict tools under
tool_choice auto): where the family's parser sees a call open, the text so far is a state of the
family's call grammar, and the whole call as the grammar writes it is one too. Runs over
TOOL_SYNTAXES, so a family added later is checked as it lands."""

from __future__ import annotations

import json

import pytest
from llama_cpp import llama_cpp as ll

from localserve.engine.lazy_grammar import grammar_after
from localserve.engine.engine import Engine
from localserve.grammar.grammar import tool_call_grammar
from localserve.parsing.tool_families import TOOL_SYNTAXES
from localserve.parsing.tools import ToolProjector
from localserve.runtime.call_wake import grammar_follows
from tinymodel import BYTE_TOKEN_OFFSET, write_tiny_gguf

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"name": "get_weather", "parameters": SCHEMA}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("families") / "tiny.gguf", n_head=1)   # 64-wide: see test_grammar.py
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


# ---- const in the families derived from a template's key/value markup (issue 46, item 9) --------
# A value the schema fixes (`const`, a one-item `enum`) is the one text a strict call may write there,
# in the families whose calls write each argument as a key and a bare value, not as JSON.
CONST_TOOLS = [{"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "const": "Paris"},
                                     "days": {"type": "integer", "const": 3}},
    "required": ["city", "days"]}}]
DERIVED_KEY_VALUE = ["GLM-4.6", "MiniMax-M2", "deepseek-ai-DeepSeek-V3.2", "Kimi-K3"]


def call_before(family, text: str, key: str, value: str) -> str:
    """The text of the call the projector sees open in `text`, up to where `key`'s value is written."""
    projector = ToolProjector(family, {t["name"]: t["parameters"] for t in CONST_TOOLS})
    projector.feed(text[:text.index(value, text.index(key))])
    assert projector.open_call is not None, text
    return projector.open_call.text


@pytest.mark.parametrize("name", DERIVED_KEY_VALUE)
def test_a_strict_call_writes_the_const_value_and_nothing_else(engine, name):
    from localserve.models.loaded import detect_chat_family
    from template_calls import rendered_calls, template
    family = detect_chat_family(template(name))
    assert family.grammar.layout == "pairs", family.name        # a derived key/value family
    grammar = tool_call_grammar(family, CONST_TOOLS, parallel=False, loose_markup=True)
    text = rendered_calls(template(name), [("get_weather", {"city": "Paris", "days": 3})])
    city = call_before(family, text, "city", "Paris")
    assert takes(engine, grammar, city + "Paris")
    assert not takes(engine, grammar, city + "Rome") and not takes(engine, grammar, city + "Pa" + "x")
    days = call_before(family, text, "days", "3")
    assert takes(engine, grammar, days + "3") and not takes(engine, grammar, days + "4")
