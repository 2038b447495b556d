"""A call the model makes: its id is minted neutral below the dialects when the model wrote none,
and each dialect shows it in its own form (call_… for both OpenAI dialects, toolu_… for
Anthropic), the same in a stream and in a whole answer; an id the model wrote is its own."""

from __future__ import annotations

import orjson

from localserve.dialects.anthropic.replies import MessageMeta, final_response as anthropic_final, tool_use_id
from localserve.dialects.openai.chat import ChatChunks, final_response as chat_final
from localserve.dialects.responses.stream import ResponseEvents
from localserve.generation import Finished, GenerationOutput, ToolCall, ToolCallStart
from localserve.parsing.tools import parse_generated_tools

MINTED = ToolCall("aB3dE5gH7kL9mN1pQ2rS4tU6", "f", "{}", minted=True)
OWN = ToolCall("q1w2e3r4t", "f", "{}")


def test_chat_shows_a_minted_id_after_call_and_the_model_s_own_as_it_is():
    output = GenerationOutput(tool_calls=[MINTED, OWN], finish_reason="tool_calls")
    calls = chat_final([Finished(output)], {"id": "chatcmpl-1"}, False)["choices"][0]["message"]["tool_calls"]
    assert [c["id"] for c in calls] == ["call_aB3dE5gH7kL9mN1pQ2rS4tU6", "q1w2e3r4t"]
    [frame] = [f for f in ChatChunks({"id": "chatcmpl-1"}, False).feed(ToolCallStart(0, MINTED.id, "f", minted=True))
               if b"tool_calls" in f]
    assert orjson.loads(frame[6:])["choices"][0]["delta"]["tool_calls"][0]["id"] == "call_" + MINTED.id


def test_anthropic_shows_toolu_and_the_random_part():
    assert tool_use_id(MINTED) == "toolu_" + MINTED.id
    assert tool_use_id(OWN) == "toolu_q1w2e3r4t"
    assert tool_use_id(ToolCall("call_xyz", "f", "{}")) == "toolu_xyz"     # a model-written OpenAI id
    output = GenerationOutput(tool_calls=[MINTED], finish_reason="tool_calls")
    [use] = anthropic_final(output, MessageMeta("msg_1", "m", b"k" * 32))["content"]
    assert use["id"] == "toolu_" + MINTED.id


def test_responses_items_carry_the_openai_form_and_get_their_final_arguments():
    events = ResponseEvents({"status": "in_progress"})
    events.feed(ToolCallStart(0, MINTED.id, "f", minted=True))
    events.finish(GenerationOutput(tool_calls=[ToolCall(MINTED.id, "f", '{"a":1}', minted=True)],
                                   finish_reason="tool_calls"))
    [item] = events.response["output"]
    assert (item["call_id"], item["arguments"]) == ("call_" + MINTED.id, '{"a":1}')


def test_the_parser_mints_neutral_ids_and_keeps_the_model_s_own():
    _, [minted] = parse_generated_tools('<tool_call>{"name": "f", "arguments": {}}</tool_call>', "hermes")
    assert minted.minted and len(minted.id) == 24 and minted.id.isalnum()
    _, [own] = parse_generated_tools('[TOOL_CALLS]f[CALL_ID]q1w2e3r4t[ARGS]{}', "mistral")
    assert (own.id, own.minted) == ("q1w2e3r4t", False)
    _, [family] = parse_generated_tools('[TOOL_CALLS][{"name": "f", "arguments": {}}]', "mistral")
    assert not family.minted and len(family.id) == 9       # Mistral's own form, shown as it is
