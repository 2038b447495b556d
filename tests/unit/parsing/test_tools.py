"""Tool-call syntaxes: whole-text parsing, streaming projection, detection."""

from __future__ import annotations

import json
import string

import jiter
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import family_templates      # tests/family_templates.py: always there, never skipped
from localserve.parsing.tool_families import TOOL_SYNTAXES, detect_tool_syntax
from localserve.generation import Chunk, ToolCallDelta, ToolCallStart
from localserve.parsing.tools import ToolProjector, parse_generated_tools

DS_CALLS_BEGIN, DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
DS_CALL_BEGIN, DS_CALL_END, DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


def stream(text_chunks, syntax, names=None, parallel=True):
    """Feed chunks, then finish: (content, [(name, concatenated fragments)], projector, events)."""
    projector = ToolProjector(syntax, names, parallel=parallel)
    events = []
    for chunk in text_chunks:
        events += projector.feed(chunk)
    events += projector.finish()
    content = "".join(e.text for e in events if isinstance(e, Chunk))
    started, fragments = {}, {}
    for event in events:
        if isinstance(event, ToolCallStart):
            assert event.index not in started, "a call index is reused"
            started[event.index] = event
            fragments[event.index] = ""
        elif isinstance(event, ToolCallDelta):
            assert event.index in started, "fragments before the call's start"
            fragments[event.index] += event.fragment
        if isinstance(event, ToolCallDelta):     # as a client reads a call's arguments while they stream
            jiter.from_json(fragments[event.index].encode(), partial_mode=True)
    streamed = {started[i].id: (started[i].name, fragments[i]) for i in started}
    # every call whose start went out is a call, with the fragments streamed as its arguments
    # (never abandoned, its text never content as well), and the call left incomplete is the last
    assert streamed == {call.id: (call.name, call.arguments) for call in projector.calls}
    assert all(call.complete for call in projector.calls[:-1])
    after_cut = events[next((i for i, e in enumerate(events) if isinstance(e, ToolCallStart)
                             and not projector.calls[e.index].complete), len(events)):]
    assert not any(isinstance(e, Chunk) for e in after_cut), "content after a call cut off"
    return content, [(c.name, c.arguments) for c in projector.calls], projector, events


def whole(text, syntax, names=None, parallel=True):
    content, calls = parse_generated_tools(text, syntax, names, parallel=parallel)
    return content, [(c.name, c.arguments) for c in calls]


# (syntax, generated text, expected content, expected [(name, arguments)])
EXAMPLES = [
    ("hermes",
     'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n'
     '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
     "Let me check.\n", [("get_weather", '{"city":"Paris","days":3}'), ("get_time", "{}")]),
    ("hermes",  # arguments before the name, nested values, escapes
     '<tool_call>{"arguments": {"q": "a \\"b\\"\\n", "n": [1, {"x": null}]}, "name": "search"}</tool_call>',
     "", [("search", '{"q":"a \\"b\\"\\n","n":[1,{"x":null}]}')]),
    ("qwen3_coder",
     "Sure.\n<tool_call>\n<function=write_file>\n<parameter=path>\n/tmp/a.txt\n</parameter>\n"
     "<parameter=content>\nline 1\nline \"2\"\n</parameter>\n<parameter=mode>\n420\n</parameter>\n"
     "<parameter=opts>\n{\"force\": true}\n</parameter>\n</function>\n</tool_call>",
     "Sure.\n",
     [("write_file", '{"path":"/tmp/a.txt","content":"line 1\\nline \\"2\\"","mode":420,'
                     '"opts":{"force":true}}')]),
    ("qwen3_coder", "<tool_call>\n<function=ping>\n</function>\n</tool_call>", "", [("ping", "{}")]),
    ("llama3", '\n{"name": "get_weather", "parameters": {"city": "Oslo"}}', "\n",
     [("get_weather", '{"city":"Oslo"}')]),
    ("llama3", '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "arguments": {}}',
     "", [("a", '{"x":1}'), ("b", "{}")]),
    ("llama3", "The answer is {not json}.", "The answer is {not json}.", []),
    ("mistral",
     '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Rome"}, "id": "abc123XYZ"}, '
     '{"name": "get_time", "arguments": {"tz": "CET"}}]',
     "", [("get_weather", '{"city":"Rome"}'), ("get_time", '{"tz":"CET"}')]),
    ("mistral", '[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}', "", [("get_weather", '{"city":"Rome"}')]),
    ("deepseek",
     f"Checking.{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}get_weather\n```json\n"
     f'{{"city": "Tokyo"}}\n```{DS_CALL_END}\n{DS_CALL_BEGIN}function{DS_SEP}get_time\n```json\n'
     f"{{}}\n```{DS_CALL_END}{DS_CALLS_END}",
     "Checking.", [("get_weather", '{"city":"Tokyo"}'), ("get_time", "{}")]),
    ("deepseek",  # V3.1 style
     f'{DS_CALLS_BEGIN}{DS_CALL_BEGIN}get_weather{DS_SEP}{{"city": "Lima"}}{DS_CALL_END}{DS_CALLS_END}',
     "", [("get_weather", '{"city":"Lima"}')]),
    ("harmony",
     '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city": "Oslo"}<|call|>',
     "", [("get_weather", '{"city":"Oslo"}')]),
    ("harmony",  # recipient in the role header, as the gpt-oss template renders history
     '<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Oslo"}<|call|>',
     "", [("get_weather", '{"city":"Oslo"}')]),
    ("harmony", "The final answer.", "The final answer.", []),
    ("json", '{"tool_calls": [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}]}',
     "", [("a", '{"x":1}'), ("b", "{}")]),
    ("json", ' {"name": "a", "arguments": {"x": [1, 2]}}', " ", [("a", '{"x":[1,2]}')]),
    ("json", '{"answer": 42}', '{"answer": 42}', []),
]


@pytest.mark.parametrize("syntax,text,content,calls", EXAMPLES)
def test_parse_whole(syntax, text, content, calls):
    assert whole(text, syntax) == (content, calls)
    for _, arguments in calls:
        assert isinstance(json.loads(arguments), dict)


@pytest.mark.parametrize("syntax,text,content,calls", EXAMPLES)
def test_stream_every_split_point(syntax, text, content, calls):
    for i in range(len(text) + 1):
        assert stream([text[:i], text[i:]], syntax)[:2] == (content, calls), i
    assert stream(list(text), syntax)[:2] == (content, calls)


@pytest.mark.parametrize("syntax,text,content,calls", EXAMPLES)
def test_three_way_splits(syntax, text, content, calls):
    for i in range(0, len(text) + 1, 3):
        for j in range(i, len(text) + 1, 5):
            assert stream([text[:i], text[i:j], text[j:]], syntax)[:2] == (content, calls)


def test_content_is_emitted_early_and_partial_markers_held():
    projector = ToolProjector("hermes", {"f"})
    assert projector.feed("Hello <to") == [Chunk(False, "Hello ")]
    assert projector.feed("ol") == []
    assert projector.feed("s are nice") == [Chunk(False, "<tools are nice")]
    assert projector.finish() == []


def test_call_starts_and_arguments_stream_before_the_call_ends():
    projector = ToolProjector("hermes", {"get_weather"})
    events = projector.feed('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa')
    assert isinstance(events[0], ToolCallStart) and events[0].name == "get_weather"
    # the model wrote no id: a neutral one, minted here, that each dialect shows in its own form
    assert events[0].index == 0 and events[0].minted and len(events[0].id) == 24 and events[0].id.isalnum()
    assert events[1:] == [ToolCallDelta(0, '{"city":"Pa')]
    assert projector.feed('ris"}}\n</tool_') == [ToolCallDelta(0, 'ris"}')]
    assert projector.calls == []  # complete only once its end marker is in
    assert projector.feed("call>") == []
    assert projector.calls[0].arguments == '{"city":"Paris"}'
    assert not projector.done  # parallel: another call may follow
    assert projector.finish() == []


def test_qwen3_coder_string_values_stream_before_the_closing_tag():
    projector = ToolProjector("qwen3_coder", {"write": {"properties": {"n": {"type": "string"}}}})
    events = projector.feed("<tool_call>\n<function=write>\n<parameter=text>\nhello wor")
    assert events[0] == ToolCallStart(0, events[0].id, "write", minted=True)
    assert events[1:] == [ToolCallDelta(0, '{"text":"hello wor')]
    # "42" of a string-typed parameter stays a string; its newline is held (maybe trailing)
    events = projector.feed('ld\n</parameter>\n<parameter=n>\n42\n')
    assert events == [ToolCallDelta(0, 'ld","n":"42')]
    projector.feed("</parameter>\n</function>\n</tool_call>")
    assert projector.calls[0].arguments == '{"text":"hello world","n":"42"}'


def test_qwen3_coder_value_conversion():
    text = ("<tool_call>\n<function=f>\n<parameter=a>\n-1.5\n</parameter>\n<parameter=b>\ntrue\n"
            "</parameter>\n<parameter=c>\ntrue story\n</parameter>\n<parameter=d>\n\"quoted\"\n"
            "</parameter>\n<parameter=e>\n[1, 2]\n</parameter>\n<parameter=f>\nnull\n</parameter>\n"
            "<parameter=g>\n\n\ntwo newlines kept\n\n</parameter>\n</function>\n</tool_call>")
    content, calls = whole(text, "qwen3_coder")
    assert content == ""
    assert json.loads(calls[0][1]) == {"a": -1.5, "b": True, "c": "true story", "d": '"quoted"',
                                       "e": [1, 2], "f": None, "g": "\n\ntwo newlines kept\n"}


def test_qwen3_coder_values_follow_the_schema_when_given():
    text = ("<tool_call>\n<function=f>\n<parameter=s>\n42\n</parameter>\n<parameter=u>\n\"hi\"\n"
            "</parameter>\n<parameter=e>\nc\n</parameter>\n<parameter=n>\nnull\n</parameter>\n"
            "<parameter=free>\n\"hi\"\n</parameter>\n</function>\n</tool_call>")
    schema = {"properties": {"s": {"type": "string"}, "u": {"type": ["string", "null"]},
                             "e": {"enum": ["c", "f"]}, "n": {"type": ["string", "null"]}}}
    expected = {"s": "42", "u": "hi", "e": "c", "n": None, "free": '"hi"'}
    for chunks in ([text], list(text)):
        _, calls, _, _ = stream(chunks, "qwen3_coder", {"f": schema})
        assert json.loads(calls[0][1]) == expected


def test_arguments_written_as_a_json_string():
    text = '<tool_call>{"name": "f", "arguments": "{\\"a\\": 1}"}</tool_call>'
    assert whole(text, "hermes") == ("", [("f", '{"a":1}')])


def test_raw_control_characters_in_strings_are_escaped():
    text = '<tool_call>{"name": "f", "arguments": {"code": "a\n\tb"}}</tool_call>'
    content, calls = whole(text, "hermes")
    assert calls == [("f", '{"code":"a\\n\\tb"}')]
    assert json.loads(calls[0][1]) == {"code": "a\n\tb"}


# markup that never became a call (no start went out): it stays content, exactly as written
NEVER_CALLS = [
    ("hermes", '<tool_call>\n{"arguments": {"a": NaN}, "name": "f"}</tool_call>'),  # broke before its name
    ("hermes", '<tool_call>\n{"name": "f'),                  # cut off inside the name
    ("hermes", "<tool_call> I changed my mind."),               # the marker, then prose, then EOS
    ("hermes", 'Hi <tool_call>{"nme": "f", "arguments": {}}</tool_call> bye'),
    ("qwen3_coder", "<tool_call>\n<function=f"),
    ("llama3", '<|python_tag|>brave_search.call(query="x")'),
    ("llama3", '{"name": "f'),
    ("mistral", '[TOOL_CALLS][{"name": "f", "arguments'),     # a Mistral call starts with its arguments
    ("deepseek", f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}f\n```js"),
    ("harmony", "<|channel|>commentary to=browser.search<|message|>{}<|call|>"),
    ("harmony", "<|channel|>commentary to=functions.f <|constrain|>js"),
]


@pytest.mark.parametrize("syntax,text", NEVER_CALLS)
def test_markup_that_never_became_a_call_stays_content(syntax, text):
    assert whole(text, syntax) == (text, [])
    for i in range(len(text) + 1):
        assert stream([text[:i], text[i:]], syntax)[:2] == (text, [])


# a call whose start went out, then cut off (at the end of the input: max_tokens, a stop string,
# EOS) or turned malformed: a call it stays, with the arguments it got, and nothing follows it
CUT_CALLS = [
    ("hermes", 'Hi <tool_call>\n{"name": "f", "arguments": {"a": 1', "Hi ", ("f", '{"a":1')),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": "x y', "", ("f", '{"a":"x y')),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": 1, "b"', "", ("f", '{"a":1,"b"')),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": ', "", ("f", "")),
    ("hermes", '<tool_call>\n{"name": "f"', "", ("f", "")),
    # turned malformed: the arguments are what came before, always the start of a JSON object
    ("hermes", 'Hi <tool_call>\n{"name": "f", "arguments": {"a": 1,,}}\n</tool_call> bye', "Hi ",
     ("f", '{"a":1,')),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": tru}}\n</tool_call>', "", ("f", '{"a":tru')),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": 1 2}}\n</tool_call>', "", ("f", '{"a":1')),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": "\\x"}}\n</tool_call>', "", ("f", '{"a":"\\')),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": 01}}\n</tool_call>', "", ("f", '{"a":0')),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a" 1}}\n</tool_call>', "", ("f", '{"a"')),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": [1]}\n</tool_call>', "", ("f", "")),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": 1]}</tool_call>', "", ("f", '{"a":1')),
    ("hermes", '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\nnot the end', "", ("f", '{"a":1}')),
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\nhello wor", "", ("f", '{"a":"hello wor')),
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n12", "", ("f", '{"a":')),  # JSON, maybe longer
    ("qwen3_coder", "<tool_call>\n<function=f>\n<parameter=a>\n1\n</function>\n</tool_call>", "",
     ("f", '{"a":"1\\n</function>\\n</tool_call>')),
    ("qwen3_coder", "<tool_call>\n<function=f>\n<oops>\n</function>\n</tool_call>", "", ("f", "{}")),
    ("llama3", '{"name": "f", "parameters": {"a": }}', "", ("f", '{"a":')),
    ("mistral", '[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}', "", ("f", '{"a":1}')),
    ("mistral", '[TOOL_CALLS]f[ARGS]{"a": [1, 2', "", ("f", '{"a":[1,2')),
    ("deepseek", f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}f\n```json\n{{\"a\": }}\n```{DS_CALL_END}", "",
     ("f", '{"a":')),
    ("harmony", '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": 1,}<|call|>', "",
     ("f", '{"a":1,')),
    ("harmony", '<|channel|>commentary to=functions.f <|constrain|>json<|message|>{"a": "b', "", ("f", '{"a":"b')),
]


@pytest.mark.parametrize("syntax,text,content,call", CUT_CALLS)
def test_a_call_cut_off_or_broken_after_its_start_stays_a_call(syntax, text, content, call):
    assert whole(text, syntax) == (content, [call])
    for i in range(len(text) + 1):
        got, calls, projector, _ = stream([text[:i], text[i:]], syntax)
        assert (got, calls) == (content, [call]), i
        assert projector.done and not projector.calls[0].complete
    assert stream(list(text), syntax)[:2] == (content, [call])


def test_a_string_parameter_cut_off_keeps_its_text_so_far():
    schema = {"f": {"properties": {"a": {"type": "string"}}}}
    text = "<tool_call>\n<function=f>\n<parameter=a>\n12 3\n</param"
    for i in range(len(text) + 1):
        assert stream([text[:i], text[i:]], "qwen3_coder", schema)[1] == [("f", '{"a":"12 3')]


def test_calls_before_a_cut_one_stay_whole():
    text = EXAMPLES[0][1]
    cut = text[:text.index('"arguments": {}') + 5]      # the second call cut inside "arguments"
    content, calls, projector, _ = stream([cut], "hermes")
    assert (content, calls) == ("Let me check.\n", [("get_weather", '{"city":"Paris","days":3}'), ("get_time", "")])
    assert [c.complete for c in projector.calls] == [True, False]


@pytest.mark.parametrize("syntax,text,content,calls", EXAMPLES)
def test_unknown_function_names_leave_the_exact_text_as_content(syntax, text, content, calls):
    assert whole(text, syntax, {"not_offered"}) == (text, [])
    assert stream(list(text), syntax, {"not_offered"})[:2] == (text, [])


def test_only_the_unknown_call_becomes_content():
    text = 'A <tool_call>{"name": "rm_rf", "arguments": {}}</tool_call> B'
    assert whole(text, "hermes", {"get_weather"}) == (text, [])
    assert whole(text, "hermes", {"rm_rf"}) == ("A B", [("rm_rf", "{}")])
    text = EXAMPLES[0][1]
    content, calls = whole(text, "hermes", {"get_time"})
    assert calls == [("get_time", "{}")]
    assert content.startswith("Let me check.\n<tool_call>") and '"get_weather"' in content


@pytest.mark.parametrize("syntax,text,rest", [
    ("mistral", '[TOOL_CALLS][{"name": "f", "arguments": {"a": 1}} {"name": "g"}]', ' {"name": "g"}]'),
    ("json", '{"tool_calls": [{"name": "f", "arguments": {"a": 1}}, oops]}', ", oops]}"),
    ("deepseek", f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}f{DS_SEP}{{\"a\": 1}}{DS_CALL_END}{DS_CALL_BEGIN}g", f"{DS_CALL_BEGIN}g"),
])
def test_calls_completed_before_a_break_in_their_block_stay(syntax, text, rest):
    assert whole(text, syntax) == (rest, [("f", '{"a":1}')])
    for i in range(len(text) + 1):
        assert stream([text[:i], text[i:]], syntax)[:2] == (rest, [("f", '{"a":1}')])


def test_valid_call_after_a_malformed_one_is_still_found():
    bad = '<tool_call>{"arguments": {,}, "name": "f"}</tool_call>'     # broken before its start went out
    good = '<tool_call>{"name": "g", "arguments": {"x": 1}}</tool_call>'
    assert whole(bad + " mid " + good, "hermes") == (bad + " mid ", [("g", '{"x":1}')])


@pytest.mark.parametrize("syntax,text,content,calls", EXAMPLES)
def test_parallel_false_keeps_only_the_first_call(syntax, text, content, calls):
    got = whole(text, syntax, parallel=False)
    assert got[1] == calls[:1]
    assert stream(list(text), syntax, parallel=False)[:2] == got


def test_done_flag():
    call = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'
    projector = ToolProjector("hermes", None, parallel=False)
    projector.feed(call[:-3])
    assert not projector.done
    projector.feed(call[-3:])
    assert projector.done
    assert projector.feed(call) == [] and len(projector.calls) == 1  # ignored after done

    projector = ToolProjector("hermes", None)
    projector.feed(call + "\n" + call)
    assert not projector.done and len(projector.calls) == 2

    projector = ToolProjector("mistral", None)
    projector.feed('[TOOL_CALLS][{"name": "f", "arguments": {}}')
    assert not projector.done and len(projector.calls) == 1
    projector.feed("]")
    assert projector.done

    projector = ToolProjector("deepseek", None)
    projector.feed(f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}f{DS_SEP}{{}}{DS_CALL_END}")
    assert not projector.done
    projector.feed(DS_CALLS_END)
    assert projector.done

    projector = ToolProjector("harmony", None)
    projector.feed("<|channel|>commentary to=functions.f<|message|>{}<|call")
    assert not projector.done
    projector.feed("|>")
    assert projector.done


def test_closing_marker_cut_off_at_end_of_generation_is_accepted():
    # The closing marker is often an end-of-generation token that never reaches us as text.
    assert whole('<tool_call>{"name": "f", "arguments": {}}\n</tool', "hermes") == ("", [("f", "{}")])
    assert whole('<|channel|>commentary to=functions.f<|message|>{"a":1}', "harmony") == (
        "", [("f", '{"a":1}')])


def test_mistral_ids():
    # The model's id is the call's when written before the arguments; written after them, it
    # comes too late for the start already streamed, so ours stands, streamed or not.
    text = ('[TOOL_CALLS][{"name": "f", "id": "abc123XYZ", "arguments": {}}, '
            '{"id": "q9w8e7r6t", "name": "g", "arguments": {}}, '
            '{"name": "h", "arguments": {}, "id": "late12345"}]')
    _, calls = parse_generated_tools(text, "mistral")
    assert [c.id for c in calls[:2]] == ["abc123XYZ", "q9w8e7r6t"]
    assert calls[2].id != "late12345" and len(calls[2].id) == 9 and calls[2].id.isalnum()  # 9, as templates demand
    _, _, projector, events = stream(list(text), "mistral")
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [s.id for s in starts] == [c.id for c in projector.calls]
    assert [s.id for s in starts[:2]] == ["abc123XYZ", "q9w8e7r6t"]
    _, calls = parse_generated_tools('[TOOL_CALLS]f[CALL_ID]q1w2e3r4t[ARGS]{"a": 1}', "mistral")
    assert (calls[0].id, calls[0].name, calls[0].arguments) == ("q1w2e3r4t", "f", '{"a":1}')


def test_mistral_call_starts_and_arguments_stream_before_the_call_ends():
    projector = ToolProjector("mistral", {"get_weather"})
    assert projector.feed('[TOOL_CALLS][{"name": "get_weather", ') == []  # an id may come first
    events = projector.feed('"arguments": {"city": "Pa')
    assert isinstance(events[0], ToolCallStart) and events[0].name == "get_weather"
    assert events[1:] == [ToolCallDelta(0, '{"city":"Pa')]
    assert projector.feed('ris", "days": 3}') == [ToolCallDelta(0, 'ris","days":3}')]
    assert projector.feed(', "id": "late12345"}') == []
    assert projector.calls[0].id == events[0].id and projector.calls[0].arguments == '{"city":"Paris","days":3}'
    assert projector.feed("]") == [] and projector.done


def test_ids_are_unique_and_streamed_ids_match():
    text = EXAMPLES[0][1]
    _, calls, projector, events = stream([text], "hermes")
    starts = [e for e in events if isinstance(e, ToolCallStart)]
    assert [s.id for s in starts] == [c.id for c in projector.calls]
    assert len({s.id for s in starts}) == 2
    assert all(s.id[5:].isalnum() for s in starts)


def test_json_content_streams_as_soon_as_it_cannot_be_a_call():
    projector = ToolProjector("json", {"f"})
    assert projector.feed('{"answer": "the long ') == [Chunk(False, '{"answer": "the long ')]
    projector = ToolProjector("llama3", {"f"})
    assert projector.feed('{"name": "g", ') == [Chunk(False, '{"name": "g", ')]


def test_reasoning_free_text_never_mistaken_for_llama3_json():
    text = "Use {braces} like this: {\"name\": 1}"
    assert whole(text, "llama3") == (text, [])


# --- detection --------------------------------------------------------------------------

TEMPLATE_SNIPPETS = {
    "hermes": "{{- '<|im_start|>system\\n<tools>' }}{{- '<tool_call>\\n{\"name\": <function-name>, "
              "\"arguments\": <args-json-object>}\\n</tool_call>' }}",
    "qwen3_coder": "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}"
                   "{{- '<parameter=' + args_name + '>\\n' }}",
    "llama3": "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' }}{{- 'Respond in the format "
              "{\"name\": function name, \"parameters\": dictionary of argument name and its value}.' }}"
              "{{- '<|python_tag|>' + tool_call.name + '.call(' }}",
    "mistral": "{{- '[AVAILABLE_TOOLS]' + tools|tojson + '[/AVAILABLE_TOOLS]' }}{{- '[TOOL_CALLS][' }}",
    "deepseek": "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + tool['type'] + "
                "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n```json\\n' }}",
    "harmony": "{{- '<|start|>assistant to=' }}{{- 'functions.' + tool_call.name + "
               "'<|channel|>commentary ' }}{{- 'json<|message|>' }}",
    "json": "{% for m in messages %}{{ '<start_of_turn>' + m.role + '\\n' + m.content }}{% endfor %}",
}


@pytest.mark.parametrize("family", sorted(TEMPLATE_SNIPPETS))
def test_detect_tool_syntax(family):
    assert detect_tool_syntax(TEMPLATE_SNIPPETS[family]) == family


def test_detect_tool_syntax_without_template():
    assert detect_tool_syntax(None) == "json" and detect_tool_syntax("") == "json"
    assert set(TOOL_SYNTAXES) == {"hermes", "qwen3_coder", "llama3", "mistral", "deepseek",
                                  "harmony", "json"}


def test_detect_tool_syntax_on_the_family_test_templates():
    expected = {"hermes": "hermes", "qwen3": "hermes", "qwen3_coder": "qwen3_coder",
                "llama3": "llama3", "mistral": "mistral", "deepseek_r1": "deepseek",
                "gpt_oss": "harmony", "gemma": "hermes", "chatml": "hermes"}  # built-ins teach hermes
    for family, template in family_templates.FAMILY_TEMPLATES.items():
        assert detect_tool_syntax(template) == expected[family], family


# --- properties -------------------------------------------------------------------------

NAMES = ["get_weather", "f", "search_docs"]
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                         st.floats(allow_nan=False, allow_infinity=False, width=32),
                         st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12))
json_args = st.dictionaries(st.text(string.ascii_letters + "_", min_size=1, max_size=6),
                            st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                                         | st.dictionaries(st.text("abc", min_size=1, max_size=3),
                                                           inner, max_size=3), max_leaves=6),
                            max_size=4)


@st.composite
def rendered_call(draw, syntax):
    """One well-formed call in the syntax's own text, with varied whitespace:
    (text, name, the arguments it should parse to)."""
    name, args = draw(st.sampled_from(NAMES)), draw(json_args)
    return _render(syntax, name, args, draw), name, _expected_args(syntax, args)


def _render(syntax, name, args, draw):
    indent = draw(st.sampled_from([None, 1]))
    body = json.dumps(args, indent=indent, ensure_ascii=draw(st.booleans()))
    ws = draw(st.sampled_from(["", "\n", " "]))
    if syntax == "hermes":
        return f'<tool_call>{ws}{{"name": "{name}", "arguments": {body}}}{ws}</tool_call>'
    if syntax == "qwen3_coder":
        params = "".join(f"<parameter={k}>\n{_raw_param(v)}\n</parameter>\n" for k, v in args.items())
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    if syntax == "llama3":
        return f'<|python_tag|>{{"name": "{name}", "parameters": {body}}}'
    if syntax == "mistral":
        return f'[TOOL_CALLS][{{"name": "{name}", "arguments": {body}, "id": "a1b2c3d4e"}}]'
    if syntax == "deepseek":
        return (f"{DS_CALLS_BEGIN}{DS_CALL_BEGIN}function{DS_SEP}{name}\n```json\n{body}\n```"
                f"{DS_CALL_END}{DS_CALLS_END}")
    if syntax == "harmony":
        return f"<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>{body}<|call|>"
    return f'{{"tool_calls": [{{"name": "{name}", "arguments": {body}}}]}}'


def _raw_param(value):
    return value if isinstance(value, str) and "</parameter>" not in value else json.dumps(value)


def _expected_args(syntax, args):
    if syntax != "qwen3_coder":
        return args
    out = {}
    for key, value in args.items():  # raw text that reads as non-string JSON becomes that
        raw = _raw_param(value)
        try:
            parsed = json.loads(raw)
        except ValueError:
            parsed = raw
        out[key] = raw if isinstance(parsed, str) else parsed
    return out


def noise(syntax):
    """Text that plays with the syntax's markers: pieces and cut-offs of them, brackets."""
    markers = list(TOOL_SYNTAXES[syntax].starts) + ["</tool_call>", "<|call|>", "<|message|>",
                                                    DS_CALL_END, "</parameter>", "[ARGS]"]
    pieces = st.sampled_from(markers + ["{", "}", "[", "]", '"', ",", ";", ":", "\n", " ", "<",
                                        "|", "name", '"name": ', "<function=f>", "json"])
    cut = st.builds(lambda m, k: m[:k], st.sampled_from(markers), st.integers(1, 12))
    return st.one_of(pieces, cut, st.text("ab xyz\n{}<>", max_size=8))


@st.composite
def generated_text(draw, syntax):
    call_text = rendered_call(syntax).map(lambda c: c[0])
    parts = draw(st.lists(st.one_of(call_text, noise(syntax),
                                    call_text.map(lambda c: c[:len(c) // 2])),
                          max_size=6))
    return "".join(parts)


@st.composite
def chunked(draw, text):
    cuts = sorted(draw(st.lists(st.integers(0, len(text)), max_size=12)))
    return [text[i:j] for i, j in zip([0] + cuts, cuts + [len(text)])]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), syntax=st.sampled_from(sorted(TOOL_SYNTAXES)),
       names=st.sampled_from([None, set(NAMES), {"f"}]), parallel=st.booleans())
def test_any_chunking_matches_whole_parse(data, syntax, names, parallel):
    """Streamed in any pieces, the same content and calls as the whole text parsed at once (the
    non-streamed reply); every call whose start went out is in it with exactly the fragments
    streamed, and no text is said twice (stream() checks both)."""
    text = data.draw(generated_text(syntax))
    chunks = data.draw(chunked(text))
    content, calls = parse_generated_tools(text, syntax, names, parallel=parallel)
    expected = content, [(c.name, c.arguments) for c in calls]
    assert stream(chunks, syntax, names, parallel=parallel)[:2] == expected
    for call in calls:      # a call that ended as it should is a JSON object
        assert not call.complete or isinstance(json.loads(call.arguments), dict)
    if not calls:  # no call: not a character lost or changed
        assert content == text
    # no text twice: a call's name is never content as well
    assert len(content) + sum(len(c.name) for c in calls) <= len(text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), syntax=st.sampled_from(sorted(set(TOOL_SYNTAXES) - {"json", "llama3"})),
       prefix=st.text("abc XYZ.,!?\n", max_size=20))
def test_well_formed_calls_round_trip(data, syntax, prefix):
    call, name, args = data.draw(rendered_call(syntax))
    text = prefix + call
    content, calls, projector, _ = stream(data.draw(chunked(text)), syntax, set(NAMES))
    assert content == prefix
    assert [(n, json.loads(a)) for n, a in calls] == [(name, args)]
    assert projector.done == (syntax in ("mistral", "deepseek", "harmony"))
