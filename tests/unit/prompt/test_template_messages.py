"""The typed conversation as the dicts a chat template reads (prompt/messages.py): the only place
OpenAI's message shape is made."""

from __future__ import annotations

import pytest

from localserve.conversation import Image, Message, Reasoning, Text, ToolCall, ToolDefinition, ToolResult
from localserve.generation import MEDIA_MARKER
from localserve.prompt.build import ChatInput, render_chat
from localserve.prompt.messages import ToolArguments, template_messages, template_tools
from localserve.prompt.templates import BUILTIN_TEMPLATES, ChatTemplate, TemplateError


def test_text_reasoning_and_calls_become_a_template_s_message():
    call = ToolCall("call_1", "f", {"x": 1}, '{"x":  1}')
    [shown] = template_messages([Message("assistant", (Text("a"), Text("b"), Reasoning("r1"), Reasoning("r2"), call))])
    assert shown == {"role": "assistant", "content": "a\nb", "reasoning_content": "r1\nr2",
                     "tool_calls": [{"type": "function", "id": "call_1",
                                     "function": {"name": "f", "arguments": {"x": 1}}}]}
    arguments = shown["tool_calls"][0]["function"]["arguments"]
    assert isinstance(arguments, ToolArguments) and str(arguments) == '{"x":  1}'   # the client's own text


def test_arguments_without_the_client_s_text_read_as_compact_json_and_a_non_object_stays_a_string():
    [shown] = template_messages([Message("assistant", (ToolCall("toolu_1", "f", {"é": [1, 2]}),
                                                       ToolCall(None, "g", "not json")))])
    first, second = shown["tool_calls"]
    assert str(first["function"]["arguments"]) == '{"é":[1,2]}'
    assert second == {"type": "function", "function": {"name": "g", "arguments": "not json"}}   # no id: none shown


def test_content_is_none_only_on_a_call_turn_without_text():
    assert template_messages([Message("assistant", (ToolCall("c", "f", {}),))])[0]["content"] is None
    assert template_messages([Message("assistant", (Text(""), ToolCall("c", "f", {})))])[0]["content"] == ""
    assert template_messages([Message("user")])[0] == {"role": "user", "content": ""}


def test_a_result_is_a_tool_turn_and_an_error_says_so():
    results = [Message("tool", (ToolResult("c1", (Text("a"), Text("b")), name="f"),)),
               Message("tool", (ToolResult("c2", "no zone", is_error=True),)),
               Message("tool", (ToolResult(None, "", is_error=True),))]
    assert template_messages(results) == [
        {"role": "tool", "tool_call_id": "c1", "name": "f", "content": "a\nb"},
        {"role": "tool", "tool_call_id": "c2", "content": "Error: no zone"},
        {"role": "tool", "content": "Error"}]


def test_a_participant_name_is_kept():
    assert template_messages([Message("user", (Text("hi"),), name="ann")]) == [
        {"role": "user", "name": "ann", "content": "hi"}]


def test_an_image_is_the_media_marker_with_no_line_break_beside_it():
    png = Image(media_type="image/png", data=b"\x89PNG")
    [shown] = template_messages([Message("user", (Text("look"), png, Text("and"), Text("this"), png))])
    assert shown["content"] == f"look{MEDIA_MARKER}and\nthis{MEDIA_MARKER}"
    [result] = template_messages([Message("tool", (ToolResult("call_1", (png, Text("a screenshot"))),))])
    assert result["content"] == f"{MEDIA_MARKER}a screenshot"


def test_the_media_marker_is_no_text_a_client_could_guess():
    assert MEDIA_MARKER.startswith("<__media_") and len(MEDIA_MARKER) > 20


def test_tools_read_as_openai_function_objects_without_strict():
    assert template_tools([ToolDefinition("f", "F", {"type": "object"}, strict=True)]) == [
        {"type": "function", "function": {"name": "f", "description": "F", "parameters": {"type": "object"}}}]


def test_render_chat_shows_the_typed_conversation_through_a_template():
    template = ChatTemplate("builtin:chatml", BUILTIN_TEMPLATES["chatml"], "", "")
    chat = ChatInput([Message("user", (Text("weather?"),)),
                      Message("assistant", (ToolCall("toolu_1", "get_weather", {"city": "Paris"}),)),
                      Message("tool", (ToolResult("toolu_1", "sunny"),))],
                     [ToolDefinition("get_weather", "Weather", {"type": "object"})])
    text = render_chat(template, chat)
    assert '{"name": "get_weather", "arguments": {"city": "Paris"}}' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text and '"description": "Weather"' in text
