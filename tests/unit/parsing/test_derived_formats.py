"""Call formats derived from a template (parsing/derive_family), read by the one format parser
(parsing/format_parser) and written by grammar/format_grammars — on small templates written
here, independent of the real corpus (tests/unit/parsing/test_template_families.py)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

import pytest

from localserve.grammar.grammar import tool_call_grammar
from localserve.parsing.call_format import common_start
from localserve.parsing.derive_family import NotDerivable, derive_format, family_name
from localserve.parsing.family_detection import (FAMILY_NAMES, KNOWN_FORMATS, derived_syntax, detect_family,
                                                 named_family)
from localserve.parsing.tool_families import HERMES
from localserve.parsing.tools import ToolProjector, parse_generated_tools
from localserve.prompt.templates import ChatTemplate

# A GLM-style template: <tool_call>NAME, then <arg_key>/<arg_value> pairs.
PAIRS = r"""{%- for m in messages -%}
<|{{ m.role }}|>{{ m.content or '' }}
{%- for c in m.tool_calls or [] -%}
<tool_call>{{ c.function.name }}
{% for k, v in c.function.arguments.items() %}<arg_key>{{ k }}</arg_key>
<arg_value>{{ v if v is string else v | tojson }}</arg_value>
{% endfor %}</tool_call>
{%- endfor -%}
{%- endfor -%}
{%- if add_generation_prompt %}<|assistant|>{% endif %}"""

# No call is ever written: nothing to derive.
NO_CALLS = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"

SCHEMAS = {"f": {"type": "object", "properties": {"s": {"type": "string"}, "n": {"type": "integer"}}},
           "g": {"type": "object", "properties": {}}}


def renderer(text: str):
    chat = ChatTemplate("test", text, "", "")
    return lambda messages, tools, prompt: chat.render_as_is(messages, tools=tools, add_generation_prompt=prompt)


def glm():
    return derived_syntax(derive_format(renderer(PAIRS)))


def test_a_pairs_template_is_taken_apart():
    fmt = derive_format(renderer(PAIRS))
    assert fmt.layout == "pairs" and family_name(fmt) == "glm"
    assert (fmt.call_open.strip(), fmt.block_close) == ("<tool_call>", "")
    assert fmt.value_stop(0).strip() == "</arg_value>"


# Tools shown in the template's own words, and no call format: nothing says how a call looks.
TOOLS_NO_CALLS = "{% if tools %}Tools: {{ tools | tojson }}{% endif %}" + NO_CALLS


def test_a_template_that_writes_no_call_derives_nothing_and_falls_back():
    with pytest.raises(NotDerivable):
        derive_format(renderer(NO_CALLS))
    # no tools shown: localserve's tools text teaches Hermes markup, read back as Hermes
    assert detect_family(NO_CALLS, renderer(NO_CALLS)).name == "hermes"
    assert detect_family(TOOLS_NO_CALLS, renderer(TOOLS_NO_CALLS)).name == "json"
    assert detect_family("{{ '<|tool_list_start|>' }}", None).name == "lfm2"
    assert detect_family("{{ 'List of tools: [' }}" + NO_CALLS, renderer(NO_CALLS)).name == "lfm2"


def test_values_follow_the_schema_where_the_markup_does_not_say():
    text = ("<tool_call>f\n<arg_key>s</arg_key>\n<arg_value>37</arg_value>\n"
            "<arg_key>n</arg_key>\n<arg_value>37</arg_value>\n</tool_call>")
    _, calls = parse_generated_tools(text, glm(), SCHEMAS)
    assert json.loads(calls[0].arguments) == {"s": "37", "n": 37}
    _, calls = parse_generated_tools(text, glm(), None)   # no schema: JSON where it parses
    assert json.loads(calls[0].arguments) == {"s": 37, "n": 37}


def test_a_call_with_no_arguments_and_one_cut_off_at_the_end():
    _, calls = parse_generated_tools("<tool_call>g</tool_call>", glm(), SCHEMAS)
    assert [(c.name, c.arguments) for c in calls] == [("g", "{}")]
    _, calls = parse_generated_tools("<tool_call>f<arg_key>s</arg_key><arg_value>x</arg_value></tool_c", glm(), SCHEMAS)
    assert [(c.name, c.arguments) for c in calls] == [("f", '{"s":"x"}')]


def test_an_unknown_call_stays_content_as_written():
    for text in ("<tool_call>h<arg_key>s</arg_key><arg_value>x</arg_value></tool_call>", "see <tool_call> here"):
        content, calls = parse_generated_tools(text, glm(), SCHEMAS)
        assert (content, calls) == (text, [])


def test_a_call_malformed_after_its_name_stays_a_call_with_the_pairs_it_got():
    for text, arguments in (("<tool_call>f<arg_key>s</arg_key>oops</tool_call>", ""),
                            ("<tool_call>f<arg_key>s</arg_key><arg_value>x</arg_value><arg_key>n</arg_key>oops",
                             '{"s":"x"')):
        content, calls = parse_generated_tools(text, glm(), SCHEMAS)
        assert (content, [(c.name, c.arguments, c.complete) for c in calls]) == ("", [("f", arguments, False)])


def test_key_value_pairs_stream_one_pair_at_a_time():
    projector = ToolProjector(glm(), SCHEMAS)
    events = []
    for piece in ("<tool_call>f<arg_key>s</arg_key><arg_value>a", "b</arg_value><arg_key>n</arg_key>",
                  "<arg_value>5</arg_value></tool_call>"):
        events += projector.feed(piece)
    events += projector.finish()
    fragments = [e.fragment for e in events if hasattr(e, "fragment")]
    assert fragments == ['{"s":"ab"', ',"n":5}']


def test_python_calls_read_quoted_strings_and_bare_values():
    lfm2 = derived_syntax(KNOWN_FORMATS["lfm2"][1], "lfm2")
    content, calls = parse_generated_tools(
        "Sure.<|tool_call_start|>[f(s='a b', n=3), g()]<|tool_call_end|>", lfm2, SCHEMAS)
    assert content == "Sure."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [("f", {"s": "a b", "n": 3}), ("g", {})]


def test_the_forced_grammar_writes_required_pairs_first_and_optional_ones_optionally():
    tools = [{"name": "f", "parameters": {"type": "object", "properties": {
        "n": {"type": "integer"}, "s": {"type": "string"}}, "required": ["s"]}}]
    grammar = tool_call_grammar(glm(), tools, parallel=False)
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    assert '"s"' in rules["call"] and '"n"' not in rules["call"]
    after_s = rules["f-after-s"]
    assert '"n"' in after_s and "</tool_call>" in after_s   # n may follow, or the call may end


def test_common_start_ends_at_a_whole_marker():
    assert common_start("</v>\n<k>", "</v>\n</call>") == "</v>\n"
    assert common_start("<|end|><|a", "<|end|><|b") == "<|end|>"
    assert common_start("abc", "abc") == "abc"


CALLS = ["<tool_call>f<arg_key>s</arg_key><arg_value>a<b</arg_value>"
         "<arg_key>n</arg_key><arg_value>2</arg_value></tool_call>",
         "<tool_call>g</tool_call>", "<tool_call>f<arg_key>s</arg_key><arg_value>", "plain <tool text"]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.sampled_from(CALLS), max_size=4), cuts=st.lists(st.integers(0, 400), max_size=10))
def test_any_chunking_of_a_derived_format_matches_the_whole_parse(parts, cuts):
    text = "".join(parts)
    syntax = glm()
    expected = parse_generated_tools(text, syntax, SCHEMAS)
    projector = ToolProjector(syntax, SCHEMAS)
    bounds = sorted(c for c in cuts if c <= len(text))
    events = []
    for i, j in zip([0] + bounds, bounds + [len(text)]):
        events += projector.feed(text[i:j])
    events += projector.finish()
    content = "".join(e.text for e in events if hasattr(e, "text"))
    assert (content, [(c.name, c.arguments) for c in projector.calls]) == \
        (expected[0], [(c.name, c.arguments) for c in expected[1]])


def test_python_literals_in_python_style_calls():
    lfm2 = derived_syntax(KNOWN_FORMATS["lfm2"][1], "lfm2")
    schemas = {"f": {"type": "object", "properties": {"a": {}, "b": {}}}}
    _, calls = parse_generated_tools("<|tool_call_start|>[f(a=True, b=None)]<|tool_call_end|>", lfm2, schemas)
    assert json.loads(calls[0].arguments) == {"a": True, "b": None}


def test_a_family_named_for_tool_syntax():
    assert named_family("hermes") is HERMES
    assert named_family("kimi_k2").name == "kimi_k2" and {"kimi_k2", "json", "harmony"} <= FAMILY_NAMES
