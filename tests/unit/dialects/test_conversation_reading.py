"""Each dialect reads its request into the typed conversation (localserve/conversation.py): the
client's own ids, arguments as data, results, reasoning, images (each checked, a bad one a 400
naming its part)."""

from __future__ import annotations

import base64

import pytest

import imagefiles  # tests/support/
from tinyaudio import tone, wav_bytes

from localserve.conversation import Image, Message, Reasoning, Text, ToolCall, ToolDefinition, ToolResult, text_message
from localserve.dialects.anthropic.input import read_input as read_anthropic
from localserve.dialects.function_tools import function_definitions
from localserve.dialects.openai.chat_input import read_messages
from localserve.dialects.responses.items import read_input as read_items, to_messages
from localserve.dialects.responses.request import open_reasoning
from localserve.dialects.responses.tools import read_tools as read_responses_tools
from localserve.dialects.signing import seal
from localserve.errors import ApiError

KEY = b"k" * 32
PNG_BYTES = imagefiles.png()
PNG = imagefiles.data_url(PNG_BYTES)


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


def test_chat_reads_image_parts_in_user_turns_in_both_forms():
    messages = read_messages({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": PNG, "detail": "low"}},
        {"type": "image_url", "image_url": PNG}]}]})
    image = Image(PNG_BYTES, "image/png")
    assert messages == [Message("user", (Text("look"), image, image))]
    assert [p.where for p in messages[0].of(Image)] == ["messages[0].content[1]", "messages[0].content[2]"]


@pytest.mark.parametrize("message, param, code", [
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}]},
     "messages[0].content[0]", "remote_image_url"),
    ({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {
        "url": imagefiles.data_url(imagefiles.WEBP, "image/webp")}}]}, "messages[0].content[1]",
     "unsupported_image_format"),
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG, "detail": 2}}]},
     "messages[0].content[0].image_url.detail", "invalid_value"),
    ({"role": "user", "content": [{"type": "image_url"}]}, "messages[0].content[0].image_url", "invalid_value"),
    ({"role": "assistant", "content": [{"type": "image_url", "image_url": PNG}]}, "messages[0].content[0]",
     "invalid_value"),
])
def test_chat_a_bad_image_part_is_a_400_naming_it(message, param, code):
    with pytest.raises(ApiError) as info:
        read_messages({"messages": [message]})
    assert (info.value.status, info.value.param, info.value.code) == (400, param, code)
    assert f"'{param}'" in info.value.message


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


def _anthropic_image(data: bytes = PNG_BYTES, media_type: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": imagefiles.b64(data)}}


def test_anthropic_reads_images_in_user_turns_and_tool_results():
    image = Image(PNG_BYTES, "image/png")
    chat = read_anthropic({"messages": [
        {"role": "user", "content": [_anthropic_image(), {"type": "text", "text": "what is it?"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [
            {"type": "text", "text": "the file"}, _anthropic_image()]}]},
        {"role": "user", "content": "and now?"},
    ]}, KEY).chat
    assert chat.messages == [
        Message("user", (image, Text("what is it?"))),
        Message("assistant", (Text(""), ToolCall("toolu_1", "Read", {}))),
        Message("tool", (ToolResult("toolu_1", (Text("the file"), image)),)),
        text_message("user", "and now?"),
    ]
    assert chat.messages[2].parts[0].content[1].where == "messages[2].content[0].content[1]"


@pytest.mark.parametrize("block, param, code", [
    (_anthropic_image(imagefiles.jpeg(), "image/png"), "messages[0].content[0]", "image_media_type_mismatch"),
    (_anthropic_image(b"not an image"), "messages[0].content[0]", "invalid_image"),
    ({"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}, "messages[0].content[0]",
     "remote_image_url"),
    ({"type": "image", "source": {"type": "base64", "data": "AAAA"}}, "messages[0].content[0].source.media_type",
     "invalid_value"),
    ({"type": "image", "source": {}}, "messages[0].content[0].source", "invalid_value"),
    ({"type": "tool_result", "tool_use_id": "t", "content": [_anthropic_image(imagefiles.TIFF, "image/tiff")]},
     "messages[0].content[0].content[0]", "unsupported_image_format"),
])
def test_anthropic_a_bad_image_block_is_a_400_naming_it(block, param, code):
    with pytest.raises(ApiError) as info:
        read_anthropic({"messages": [{"role": "user", "content": [block]}]}, KEY)
    assert (info.value.status, info.value.param, info.value.code) == (400, param, code)


@pytest.mark.parametrize("body", [{"system": [_anthropic_image()], "messages": [{"role": "user", "content": "x"}]},
                                  {"messages": [{"role": "assistant", "content": [_anthropic_image()]}]}])
def test_anthropic_an_image_outside_user_turns_is_a_400(body):
    with pytest.raises(ApiError) as info:
        read_anthropic(body, KEY)
    assert "image blocks are taken in user messages and tool results only" in info.value.message


_AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}


@pytest.mark.parametrize("content, param", [
    ([{"type": "text", "text": "hi"}, _AUDIO], "messages[0].content[1]"),
    ([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "text", "text": "rec"}, _AUDIO]}],
     "messages[0].content[0].content[1]"),
    ([{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "audio", "source": {}}]}],
     "messages[0].content[0].content[0]")])
def test_anthropic_defines_no_audio_a_block_is_a_400_naming_it_in_a_tool_result_too(content, param):
    with pytest.raises(ApiError) as info:
        read_anthropic({"messages": [{"role": "user", "content": content}]}, KEY)
    error = info.value
    assert (error.status, error.param, error.code) == (400, param, "unsupported_content_type")
    assert "defines no audio" in error.message and "/v1/audio/transcriptions" in error.message


def test_chat_a_tool_message_takes_what_the_tool_saw_and_heard():
    """OpenAI's tool messages are text; llama-server takes media in any message, and clients send
    a tool's screenshot or recording there as Responses and Ollama carry it."""
    clip = base64.b64encode(wav_bytes(tone(0.2))).decode()
    [_, message] = read_messages({"messages": [
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]},
        {"role": "tool", "tool_call_id": "c", "content": [
            {"type": "text", "text": "done"}, {"type": "image_url", "image_url": {"url": PNG}},
            {"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}}]}]})
    [result] = message.parts
    text, image, audio = result.content
    assert (result.call_id, text, image.where, audio.where) == ("c", Text("done"), "messages[1].content[1]",
                                                                "messages[1].content[2]")
    assert isinstance(image, Image) and audio.format == "wav"
    with pytest.raises(ApiError) as info:
        read_messages({"messages": [{"role": "assistant", "content": [
            {"type": "input_audio", "input_audio": {"data": clip, "format": "wav"}}]}]})
    assert "taken in user and tool messages only" in info.value.message


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


def test_responses_reads_input_images_in_user_messages_and_call_outputs():
    items = read_items([
        {"role": "user", "content": [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": PNG}]},
        {"type": "function_call", "call_id": "call_a", "name": "view_image", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_a", "output": [
            {"type": "input_image", "image_url": PNG, "detail": "high"}]},
    ])
    assert items[0]["content"][1] == {"type": "input_image", "image_url": PNG, "detail": "auto", "file_id": None}
    image = Image(PNG_BYTES, "image/png")
    messages = to_messages(items, inputs=3)
    assert messages[0] == Message("user", (Text("look"), image))
    assert messages[2] == Message("tool", (ToolResult("call_a", (image,), name="view_image"),))
    assert messages[0].parts[1].where == "input[0].content[1]"
    # a truncated history is made into messages again: its images are decoded once
    decoded: dict = {}
    first = to_messages(items, inputs=3, images=decoded)
    again = to_messages(items[1:], inputs=3, images=decoded)
    assert again[-1].parts[0].content[0] is first[-1].parts[0].content[0] and len(decoded) == 2


@pytest.mark.parametrize("part, param, code", [
    ({"type": "input_image", "file_id": "file-abc"}, "input[0].content[0]", "unsupported_image_source"),
    ({"type": "input_image", "image_url": "https://x.test/a.png"}, "input[0].content[0]", "remote_image_url"),
    ({"type": "input_image", "image_url": imagefiles.data_url(imagefiles.HEIC, "image/heic")},
     "input[0].content[0]", "unsupported_image_format"),
    ({"type": "input_image", "image_url": PNG, "detail": ["high"]}, "input[0].content[0].detail", "invalid_value"),
])
def test_responses_a_bad_input_image_is_a_400_naming_it(part, param, code):
    with pytest.raises(ApiError) as info:
        read_items([{"role": "user", "content": [part]}], "input")
    assert (info.value.status, info.value.param, info.value.code) == (400, param, code)
    if code == "unsupported_image_source":
        assert "Files API" in info.value.message
