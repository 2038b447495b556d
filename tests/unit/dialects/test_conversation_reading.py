"""Each dialect reads its request into the typed conversation (localserve/conversation.py): the
client's own ids, arguments as data, results, reasoning; an image is still each dialect's 400."""

from __future__ import annotations

import pytest

from localserve.conversation import Message, Reasoning, Text, ToolCall, ToolDefinition, ToolResult, text_message
from localserve.dialects.anthropic.input import read_input as read_anthropic
from localserve.dialects.function_tools import function_definitions
from localserve.dialects.openai.chat_input import read_messages
from localserve.dialects.responses.items import read_input as read_items, to_messages
from localserve.dialects.responses.request import open_reasoning
from localserve.dialects.responses.tools import read_tools as read_responses_tools
from localserve.dialects.signing import seal
from localserve.errors import ApiError

KEY = b"k" * 32
PNG = "data:image/png;base64,iVBORw0KGgo="


# ---- Chat Completions -------------------------------------------------------------------

def test_chat_messages_keep_their_ids_text_reasoning_and_arguments_as_data():
    messages = read_messages({"messages": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "input_text", "text": "b"}],
         "name": "ann"},
        {"role": "assistant", "content": None, "reasoning_content": "think", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x":  1}'}},
            {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": "not json"}},
            {"id": "call_3", "type": "function", "function": {"name": "h", "arguments": ""}},
            {"type": "function", "function": {"name": "k", "arguments": {"y": 2}}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "f", "content": [{"type": "text", "text": "ok"}]},
        {"role": "tool", "tool_call_id": "call_2"},
    ]})
    assert messages == [
        text_message("developer", "Be brief."),
        Message("user", (Text("a"), Text("b")), name="ann"),
        Message("assistant", (Reasoning("think"), ToolCall("call_1", "f", {"x": 1}, '{"x":  1}'),
                              ToolCall("call_2", "g", "not json"), ToolCall("call_3", "h", {}),
                              ToolCall(None, "k", {"y": 2}))),
        Message("tool", (ToolResult("call_1", (Text("ok"),), name="f"),)),
        Message("tool", (ToolResult("call_2", ()),)),
    ]


def test_chat_refuses_an_image_part_as_before():
    body = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG}}]}]}
    with pytest.raises(ApiError) as info:
        read_messages(body)
    assert info.value.status == 400 and "content part type 'image_url' is not supported" in info.value.message


def test_function_tools_become_definitions_with_strict():
    tools = [{"type": "function", "function": {"name": "f", "description": "F", "parameters": {"type": "object"},
                                               "strict": True}},
             {"type": "function", "name": "g"}]
    assert function_definitions(tools) == [
        ToolDefinition("f", "F", {"type": "object"}, strict=True),
        ToolDefinition("g", "", {"type": "object", "properties": {}})]
    with pytest.raises(ApiError) as info:
        function_definitions([{"type": "web_search"}])
    assert info.value.param == "tools"


# ---- Anthropic Messages -----------------------------------------------------------------

def test_anthropic_tool_use_input_is_data_and_results_keep_is_error():
    chat = read_anthropic({"messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_9", "name": "f", "input": {"a": [1]}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "is_error": True,
                                      "content": [{"type": "tool_reference", "tool_name": "g"}]}]},
    ], "tools": [{"name": "f", "input_schema": {"type": "object"}, "strict": True}]}, KEY).chat
    assert chat.messages == [
        text_message("user", "go"),
        Message("assistant", (Text(""), ToolCall("toolu_9", "f", {"a": [1]}))),
        Message("tool", (ToolResult("toolu_9", "[tool available: g]", is_error=True),)),
    ]
    assert chat.tools == [ToolDefinition("f", "", {"type": "object"}, strict=True)]


def test_anthropic_refuses_an_image_block_as_before():
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(ApiError) as info:
        read_anthropic({"messages": [{"role": "user", "content": [image]}]}, KEY)
    assert info.value.status == 400 and "content blocks of type 'image' are not supported" in info.value.message


# ---- Responses ----------------------------------------------------------------------------

def test_responses_items_become_turns_with_the_call_ids_and_tool_names():
    items = read_items([
        {"role": "user", "content": "hi"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "plan"}]},
        {"type": "function_call", "call_id": "call_a", "name": "f", "arguments": '{"x":1}'},
        {"type": "custom_tool_call", "call_id": "call_b", "name": "patch", "input": "*** Begin"},
        {"type": "local_shell_call", "call_id": "call_c", "action": {"type": "exec", "command": ["ls"]}},
        {"type": "function_call_output", "call_id": "call_a", "output": "1"},
        {"type": "custom_tool_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "ok"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
    ])
    assert to_messages(items, "Be brief.") == [
        text_message("system", "Be brief."),
        text_message("user", "hi"),
        Message("assistant", (Text(""), Reasoning("plan"), ToolCall("call_a", "f", {"x": 1}, '{"x":1}'),
                              ToolCall("call_b", "patch", {"input": "*** Begin"}),
                              ToolCall("call_c", "local_shell", {"command": ["ls"]}))),
        Message("tool", (ToolResult("call_a", "1", name="f"),)),
        Message("tool", (ToolResult("call_b", "ok", name="patch"),)),
        text_message("assistant", "done"),
    ]


def test_responses_sealed_reasoning_replays_as_the_text_it_sealed():
    items = read_items([{"role": "user", "content": "hi"},
                        {"type": "reasoning", "summary": [], "encrypted_content": seal(KEY, "secret plan")},
                        {"role": "assistant", "content": "answer"}])
    assert to_messages(open_reasoning(KEY, items, "previous_response_id")) == [
        text_message("user", "hi"), Message("assistant", (Text("answer"), Reasoning("secret plan")))]


def test_responses_namespaced_and_custom_tools_are_definitions_under_qualified_names():
    tools = read_responses_tools({"tools": [
        {"type": "namespace", "name": "fs", "tools": [{"type": "function", "name": "read", "strict": True}]},
        {"type": "custom", "name": "patch"}]})
    assert [(d.name, d.strict) for d in tools.definitions] == [("fs.read", True), ("patch", False)]
    assert tools.definitions[1].parameters["required"] == ["input"]


def test_responses_refuses_an_image_part_as_before():
    with pytest.raises(ApiError) as info:
        read_items([{"role": "user", "content": [{"type": "input_image", "image_url": PNG}]}])
    assert info.value.status == 400 and info.value.code == "unsupported_value"
