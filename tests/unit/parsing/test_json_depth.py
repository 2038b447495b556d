"""JSON a client sends inside a string is read only as deep as the walks after it take (hostile2):
a tool call's `arguments` of 1,000 nested objects parsed (orjson reads 1,024 levels) and the
template's tojson then recursed past Python's limit, a 500 on Chat Completions."""

from __future__ import annotations

import orjson

from localserve.dialects.function_tools import call_arguments
from localserve.parsing.json_depth import MAX_JSON_DEPTH, json_object, nests_deeper
from localserve.prompt.messages import ToolArguments, _tool_arguments


def nested_objects(depth: int) -> str:
    return '{"a":' * depth + "1" + "}" * depth


def test_an_object_as_deep_as_the_limit_is_read_and_one_deeper_stays_text():
    assert json_object(nested_objects(MAX_JSON_DEPTH)) is not None
    assert json_object(nested_objects(MAX_JSON_DEPTH + 1)) is None
    assert json_object("[" * 1000 + "]" * 1000) is None          # not an object at all
    assert json_object('{"a": [1, 2]}') == {"a": [1, 2]} and json_object("{oops") is None


def test_depth_is_counted_through_arrays_and_past_empty_ones():
    deep = "[" * (MAX_JSON_DEPTH + 5) + "]" * (MAX_JSON_DEPTH + 5)
    assert nests_deeper(deep, orjson.loads(deep))
    wide = "[" + ",".join(["[]"] * 500) + "]"        # many brackets, two levels
    assert not nests_deeper(wide, orjson.loads(wide))


def test_a_call_s_arguments_too_deep_stay_the_client_s_text():
    text = nested_objects(1000)
    assert call_arguments(text) == (text, None)
    assert _tool_arguments(text) == text
    shallow = nested_objects(3)
    assert call_arguments(shallow) == (orjson.loads(shallow), shallow)
    assert isinstance(_tool_arguments(shallow), ToolArguments)


def test_a_generated_call_nested_past_what_the_answer_s_writer_takes_is_answered_with_empty_arguments():
    """A grammar made the model write 300 nested objects (orjson writes 254): Anthropic's and
    Ollama's whole answers were a 500, Ollama's stream was cut without its last line."""
    from localserve.dialects.anthropic.replies import tool_input
    from localserve.dialects.ollama.replies import WholeCalls, tool_calls
    from localserve.generation import GenerationOutput, ToolCall, ToolCallDelta, ToolCallStart

    deep = nested_objects(300)
    assert tool_input(deep) == {} and tool_input(nested_objects(2)) == {"a": {"a": 1}}
    output = GenerationOutput(tool_calls=[ToolCall("c1", "f", deep), ToolCall("c2", "g", '{"x": 1}')])
    answered = tool_calls(output)
    assert [c["function"]["arguments"] for c in answered] == [{}, {"x": 1}]
    orjson.dumps(answered)
    whole = WholeCalls()
    whole.start(ToolCallStart(0, "c1", "f"))
    assert whole.delta(ToolCallDelta(0, deep)) == []          # never whole: it goes out at the end, as {}
