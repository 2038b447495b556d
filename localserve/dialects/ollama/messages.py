"""Ollama's chat messages → the conversation every dialect builds its prompt from.

This is the one place the dialect reads a conversation. An Ollama message is {role, content,
thinking?, tool_calls?: [{function: {name, arguments: object}}], tool_name?, tool_call_id?,
images?}. A call's arguments are data (an object; some clients send OpenAI's JSON text). Ollama
matches a tool result to its call by order and name, not by id: a call the client sent without
an id gets one of its own, and the tool result that follows it (the earliest open call of its
`tool_name`) the same id. A user or tool message's `images` (base64, the format found from
the bytes) go before its text. Ollama sends audio the same way: an item of `images` whose bytes
are a WAV or an MP3 (llm/media.go's AudioFormat: RIFF/WAVE, ID3, an MPEG sync word) is a clip,
as is a FLAC here (libmtmd decodes it as Chat Completions' input_audio does).
"""

from __future__ import annotations

from typing import Any

from ...conversation import Audio, Image, Message, Part, Reasoning, Text, ToolCall, ToolResult
from ...prompt.build import ChatInput
from ..fields import invalid, kind_of
from ..function_tools import call_arguments, function_definitions, read_tool_choice
from ..audio_parts import audio_from_base64, hold_audio_count, is_audio_base64
from ..image_parts import hold_image_count, image_from_base64
from .options import read_format, template_kwargs

ROLES = ("system", "user", "assistant", "tool")


def read_chat(body: dict, think: bool | None, level: str | None, messages: list[Message]) -> ChatInput:
    """The chat input of a request whose messages were read (read_messages)."""
    chat = ChatInput(messages=messages, template_kwargs=template_kwargs(think, level))
    chat.tools = function_definitions(body.get("tools"))
    # not Ollama's (it ignores one): the AI SDK's Ollama provider sends Chat Completions' form
    chat.tool_choice = read_tool_choice(body.get("tool_choice"), chat.tools)
    chat.json_object, chat.response_schema = read_format(body)
    return chat


def read_messages(value: Any) -> list[Message]:
    if not isinstance(value, list):
        raise invalid("messages", f"expected an array of messages, got {kind_of(value)}")
    hold_media_count([(f"messages[{i}].images[{k}]", data) for i, message in enumerate(value)
                      if isinstance(message, dict) and isinstance(message.get("images"), list)
                      for k, data in enumerate(message["images"])])
    out: list[Message] = []
    open_calls: list[tuple[str, str]] = []       # (name, id) of calls whose results have not come yet
    for i, message in enumerate(value):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(param, f"expected an object, got {kind_of(message)}")
        role = message.get("role")
        if role not in ROLES:
            raise invalid(f"{param}.role", f"expected one of {', '.join(ROLES)}, got {role!r}")
        content = message.get("content", "")
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise invalid(f"{param}.content", f"expected a string, got {kind_of(content)}")
        images = read_images(message.get("images"), f"{param}.images", role in ("user", "tool"))
        thinking = message.get("thinking")
        if thinking is not None and not isinstance(thinking, str):
            raise invalid(f"{param}.thinking", f"expected a string, got {kind_of(thinking)}")
        if role == "tool":
            name = read_optional_str(message, "tool_name", param)
            call_id = read_optional_str(message, "tool_call_id", param) or take_call(open_calls, name)
            out.append(Message(role, (ToolResult(call_id, (*images, Text(content)), name=name),)))
            continue
        parts: list[Part] = [*images, Text(content)]
        if thinking and role == "assistant":
            parts.append(Reasoning(thinking))
        if role == "assistant" and message.get("tool_calls") is not None:
            calls = read_calls(message["tool_calls"], f"{param}.tool_calls", i)
            parts.extend(calls)
            open_calls = [(call.name, call.id) for call in calls]
        out.append(Message(role, tuple(parts)))
    return out


def read_images(value: Any, param: str, allowed: bool = True) -> list[Image | Audio]:
    """`images`: base64 strings (the ollama clients encode bytes and files so), each an image
    or, by its first bytes, an audio clip."""
    if value is None or value == []:
        return []
    if not allowed:
        raise invalid(param, "images are taken on user and tool messages only")
    if not isinstance(value, list):
        raise invalid(param, f"expected an array of base64 images, got {kind_of(value)}")
    hold_media_count([(f"{param}[{k}]", data) for k, data in enumerate(value)])
    return [audio_from_base64(data, None, f"{param}[{k}]") if is_audio_base64(data)
            else image_from_base64(data, None, f"{param}[{k}]") for k, data in enumerate(value)]


def hold_media_count(items: list[tuple[str, Any]]) -> None:
    """The image and the audio counts held apart, before any item's base64 is decoded whole
    (an item's kind is read from its first bytes)."""
    hold_audio_count(place for place, data in items if is_audio_base64(data))
    hold_image_count(place for place, data in items if not is_audio_base64(data))


def read_calls(value: Any, param: str, turn: int) -> list[ToolCall]:
    if not isinstance(value, list):
        raise invalid(param, f"expected an array of tool calls, got {kind_of(value)}")
    calls = []
    for j, call in enumerate(value):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise invalid(f"{param}[{j}]", "expected an object with a 'function' object that has a 'name'")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, (str, dict)):
            raise invalid(f"{param}[{j}].function.arguments", f"expected an object, got {kind_of(arguments)}")
        data, text = call_arguments(arguments)       # some clients send OpenAI's JSON text here
        if not isinstance(data, dict):
            raise invalid(f"{param}[{j}].function.arguments", "expected a JSON object")
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = f"call_{turn}_{j}"
        calls.append(ToolCall(call_id, function["name"], data, text))
    return calls


def take_call(open_calls: list[tuple[str, str]], name: str | None) -> str | None:
    """The id of the earliest open call with this name (or the earliest, without a name)."""
    for k, (call_name, call_id) in enumerate(open_calls):
        if name is None or call_name == name:
            del open_calls[k]
            return call_id
    return None


def read_optional_str(message: dict, name: str, param: str) -> str | None:
    value = message.get(name)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise invalid(f"{param}.{name}", f"expected a string, got {kind_of(value)}")
    return value
