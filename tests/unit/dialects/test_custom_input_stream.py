"""A custom tool call's input streamed by ResponseEvents (dialects/responses/stream.py) equals the
input of its output item, however the arguments are written and cut into fragments."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from localserve.dialects.responses.stream import ResponseEvents
from localserve.dialects.responses.tools import ToolKind
from localserve.generation import GenerationOutput, ToolCallDelta, ToolCallStart
from localserve.parsing.tools import ToolCall

PATCH = '*** Begin Patch\n*** Add File: "a b.txt"\n+caf\u00e9 \U0001F600 \\ end\t.\n*** End Patch\n'
ARGUMENTS = [
    json.dumps({"input": PATCH}, separators=(",", ":")),                       # escapes: \n \" \\ \t
    json.dumps({"input": PATCH}, separators=(",", ":"), ensure_ascii=True),    # \u00e9 and a surrogate pair
    '{"input":"' + PATCH.replace("\n", "\\n").replace('"', '\\"')[:40],        # cut off: the output ran out
    '{"input":"first","input":"second"}',                                        # a key twice
    '{"input":"one","note":"two"}',                                              # another member after it
    '{"input":"bad \\q escape"}',                                                # not JSON midway
    '{"input":"lone \\udc00 half"}',
    '{"input":"raw \x01 control"}',
    '{"note":"x","input":"later"}',                                              # another shape
    '{"input":7}',
    'not json at all',
]


def stream_and_final(arguments: str, cuts: list[int], ended: bool = True) -> tuple[str, str, str]:
    """(the input the deltas streamed, the input of the .done event, the item's input)."""
    shaper = ResponseEvents({"status": "in_progress"}, tool_kinds={"patch": ToolKind("custom", "apply_patch")})
    events = shaper.feed(ToolCallStart(0, "call_1", "patch"))
    bounds = [0, *sorted(set(cuts)), len(arguments)]
    for start, end in zip(bounds, bounds[1:]):
        events += shaper.feed(ToolCallDelta(0, arguments[start:end]))
    calls = [ToolCall("call_1", "patch", arguments)] if ended else []
    events += shaper.finish(GenerationOutput(tool_calls=calls, finish_reason="tool_calls" if ended else "length"))
    streamed = "".join(e["delta"] for e in events if e["type"] == "response.custom_tool_call_input.delta")
    [done] = [e for e in events if e["type"] == "response.custom_tool_call_input.done"]
    [item] = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    return streamed, done["input"], item["input"]


@pytest.mark.parametrize("arguments", ARGUMENTS)
def test_streamed_input_is_the_final_input_cut_anywhere(arguments):
    for ended in (True, False):
        whole = stream_and_final(arguments, [], ended)
        assert whole[0] == whole[1] == whole[2], whole
        for cut in range(1, len(arguments)):
            assert stream_and_final(arguments, [cut], ended) == whole, cut
        assert stream_and_final(arguments, list(range(1, len(arguments))), ended) == whole   # a character at a time


def test_the_input_is_the_decoded_string():
    streamed, done, _ = stream_and_final(ARGUMENTS[1], list(range(1, len(ARGUMENTS[1]), 3)))
    assert streamed == done == PATCH


@settings(max_examples=300, deadline=None)
@given(st.text(st.characters(codec="utf-8"), max_size=30), st.booleans(), st.lists(st.integers(1, 200), max_size=8))
def test_any_input_any_fragments(text, ascii_only, cuts):
    arguments = json.dumps({"input": text}, separators=(",", ":"), ensure_ascii=ascii_only)
    streamed, done, item = stream_and_final(arguments, [c for c in cuts if c < len(arguments)])
    assert streamed == done == item == text
