"""Chat Completions messages read into the conversation (localserve/conversation.py).

Content is a string or text parts (``text``, ``input_text``), and in a user or a tool turn image
parts (``image_url``: a base64 data: URL, as an object with ``url`` and ``detail`` or as the bare
string some clients send; dialects/image_parts.py checks it) and audio parts (``input_audio``:
base64 ``data`` and its ``format``; dialects/audio_parts.py). OpenAI's tool messages are text,
but llama-server takes media in any message and clients send what a tool saw or heard there, as
Responses' function_call_output and Ollama's tool messages carry it; an assistant turn's
``reasoning_content`` and ``tool_calls`` (arguments a JSON string, or an object) and a tool
turn's ``tool_call_id`` are kept with the client's ids; ``name`` too. Other fields of a
message are not read.
"""

from __future__ import annotations

from typing import Any

from ...conversation import Image, Message, Part, Reasoning, Text, ToolCall, ToolResult
from ..fields import invalid, kind_of
from ..function_tools import call_arguments
from ..audio_parts import INPUT_AUDIO, hold_audio_count, input_audio
from ..image_parts import hold_image_count, image_from_url, typed_parts

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
TEXT_PARTS = ("text", "input_text")
MEDIA_ROLES = ("user", "tool")             # the turns whose content may hold images and clips


def read_messages(body: dict) -> list[Message]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "expected a non-empty array of messages")
    hold_image_count(place for i, message in enumerate(messages) if isinstance(message, dict)
                     for place in typed_parts(message.get("content"), f"messages[{i}].content", "image_url"))
    hold_audio_count(place for i, message in enumerate(messages) if isinstance(message, dict)
                     for place in typed_parts(message.get("content"), f"messages[{i}].content", INPUT_AUDIO))
    return [read_message(message, f"messages[{i}]") for i, message in enumerate(messages)]


def read_message(message: Any, where: str) -> Message:
    if not isinstance(message, dict):
        raise invalid(where, "expected an object")
    role = message.get("role")
    if role not in ROLES:
        raise invalid(f"{where}.role", f"expected one of {', '.join(ROLES)}")
    content = _content(message.get("content"), f"{where}.content", images=role in MEDIA_ROLES)
    calls = read_tool_calls(message, f"{where}.tool_calls")
    name = message.get("name") if isinstance(message.get("name"), str) else None
    if role == "tool":
        call_id = message.get("tool_call_id")
        result = ToolResult(call_id if isinstance(call_id, str) else None, tuple(content), name=name)
        return Message(role, (result,))
    parts: list[Part] = list(content)
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        parts.append(Reasoning(reasoning))
    parts.extend(calls)
    return Message(role, tuple(parts), name=name)


def _content(content: Any, where: str, *, images: bool) -> list[Text | Image]:
    """A message's content as parts; images: image and audio parts are taken (MEDIA_ROLES)."""
    if content is None:
        return []
    if isinstance(content, str):
        return [Text(content)]
    if not isinstance(content, list):
        raise invalid(where, "expected a string or an array of content parts")
    parts: list[Text | Image] = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            parts.append(Text(str(part.get("text") or "")))
        elif kind == "image_url" and images:
            parts.append(_image(part, f"{where}[{i}]"))
        elif kind == "image_url":
            raise invalid(f"{where}[{i}]", "image parts are taken in user and tool messages only")
        elif kind == INPUT_AUDIO and images:
            parts.append(input_audio(part, f"{where}[{i}]"))
        elif kind == INPUT_AUDIO:
            raise invalid(f"{where}[{i}]", "audio parts are taken in user and tool messages only")
        else:
            raise invalid(where, f"content part type '{kind}' is not supported; this server takes text, "
                                 f"image_url and input_audio parts")
    return parts


def _image(part: dict, where: str) -> Image:
    """{"type": "image_url", "image_url": {"url": "data:...", "detail"?}} or {"image_url": "data:..."}."""
    value = part.get("image_url")
    if isinstance(value, dict):
        detail = value.get("detail")
        if detail is not None and not isinstance(detail, str):     # any level: the projector reads its own size
            raise invalid(f"{where}.image_url.detail", "expected a string (auto, low, high)")
        return image_from_url(value.get("url"), where)
    if isinstance(value, str):
        return image_from_url(value, where)
    raise invalid(f"{where}.image_url", 'expected {"url": "data:image/png;base64,..."}')


def read_tool_calls(message: dict, param: str) -> list[ToolCall]:
    """An assistant message's earlier calls: [{"id", "type": "function", "function": {"name", "arguments"}}]."""
    calls = message.get("tool_calls")
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise invalid(param, f"expected an array of tool calls, got {kind_of(calls)}")
    found = []
    for j, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise invalid(f"{param}[{j}]", "expected an object with a 'function' object that has a 'name'")
        arguments = function.get("arguments")
        if arguments is not None and not isinstance(arguments, (str, dict)):
            raise invalid(f"{param}[{j}].function.arguments", "expected a JSON string")
        call_id = call.get("id")
        found.append(ToolCall(call_id if isinstance(call_id, str) else None, function["name"],
                              *call_arguments(arguments)))
    return found
