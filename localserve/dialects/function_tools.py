"""What both OpenAI dialects (Chat Completions, /apply-template, Responses) read alike: function
tools, ``{"type": "function", "function": {...}}`` or the flat ``{"type": "function", "name":
...}``, into tool definitions; a call's arguments sent as JSON text, into data; the id of a
call the model makes, as they show it; Chat Completions' ``tool_choice``, which Ollama's chat
takes too."""

from __future__ import annotations

from typing import Any

from ..conversation import ToolDefinition
from ..errors import ApiError
from ..generation import ToolCall, ToolCallStart
from ..parsing.json_depth import json_object
from ..prompt.build import ToolChoice
from .fields import invalid

NO_PARAMETERS = {"type": "object", "properties": {}}


def openai_call_id(call: ToolCall | ToolCallStart) -> str:
    """A generated call's id as both OpenAI dialects show it: the model's own, or call_ and the
    random part minted for it."""
    return "call_" + call.id if call.minted else call.id


def function_definitions(tools: Any, param: str = "tools") -> list[ToolDefinition]:
    """The function tools; any other type is a 400 naming `param`."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise ApiError(400, f"invalid '{param}': expected an array", param=param)
    found = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ApiError(400, f"invalid '{param}[{i}]': expected an object", param=param)
        kind = tool.get("type", "function")
        if kind != "function":
            raise ApiError(400, f"tool type '{kind}' is not supported; only function tools are", param=param)
        fn = tool.get("function") if "function" in tool else tool
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ApiError(400, f"invalid '{param}[{i}]': a function needs a name", param=param)
        params = fn.get("parameters")
        if params is not None and not isinstance(params, dict):
            raise ApiError(400, f"invalid '{param}[{i}].function.parameters': expected an object", param=param)
        found.append(ToolDefinition(fn["name"], fn.get("description", ""), params or dict(NO_PARAMETERS),
                                    strict=fn.get("strict") is True))
    return found


def call_arguments(value: str | dict | None) -> tuple[dict | str, str | None]:
    """(the arguments as data, the client's JSON text of them): "" and None are {}; a string
    that is not a JSON object stays the string."""
    if value is None or isinstance(value, dict):
        return value or {}, None
    if not value.strip():
        return {}, None
    parsed = json_object(value)
    return (parsed, value) if parsed is not None else (value, None)


def read_tool_choice(value: Any, tools: list[ToolDefinition]) -> ToolChoice:
    """`tool_choice` as Chat Completions takes it (Ollama's /api/chat too, where the AI SDK's
    Ollama provider sends it): none, auto, required, or a function named nested or flat."""
    if value is None:
        return ToolChoice("auto")
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise invalid("tool_choice", "expected none, auto, required or a named function")
        if value == "required" and not tools:
            raise invalid("tool_choice", "'required' needs at least one tool")
        return ToolChoice(value)
    if isinstance(value, dict):
        fn = value.get("function") if isinstance(value.get("function"), dict) else value
        name = fn.get("name")
        if not isinstance(name, str) or name not in {t.name for t in tools}:
            raise invalid("tool_choice", f"names a function that is not among the tools: {name!r}")
        return ToolChoice("named", name)
    raise invalid("tool_choice", "expected a string or an object")
