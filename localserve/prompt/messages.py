"""Messages as chat templates expect them: the typed conversation as HF-convention dicts.

Templates are written against HF's conventions (OpenAI's chat message shape, with arguments
as a mapping): :func:`template_messages` and :func:`template_tools` make those from the
conversation (localserve/conversation.py), the only place that shape is made;
:func:`normalize_messages` normalizes such dicts (the probe's own conversations too). System
turns after the first message are kept or folded into the user turns around them
(:func:`fold_system_turns`).
"""

from __future__ import annotations

from typing import Any, Callable

import orjson

from ..conversation import Audio, Image, Message, Reasoning, Text, ToolCall, ToolDefinition, ToolResult
from ..generation import MEDIA_MARKER
from ..parsing.json_depth import json_object
from .jinja_env import TemplateError, tojson as _tojson

__all__ = ["ToolArguments", "fold_system_turns", "has_later_system_turns", "join_text_parts",
           "normalize_messages", "shows_every_system_turn", "template_messages", "template_tools"]


# --- messages ----------------------------------------------------------------

_TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})


class ToolArguments(dict):
    """Tool-call arguments: a dict that still reads as the JSON text it came from.

    Templates disagree about arguments. Qwen, Llama and Mistral templates do
    ``arguments | tojson`` or ``arguments.items()`` and need a dict; DeepSeek's
    concatenates ``'```json\\n' + arguments`` and needs the string. This is both:
    a mapping for the first kind, the client's own text under ``str()``, ``~``
    and ``+`` for the second (so the prompt repeats what the model generated).
    """

    def __init__(self, value: dict, text: str) -> None:
        super().__init__(value)
        self._text = text  # underscore: invisible to sandboxed templates

    def __str__(self) -> str:
        return self._text

    def __add__(self, other: Any) -> Any:
        return self._text + other if isinstance(other, str) else NotImplemented

    def __radd__(self, other: Any) -> Any:
        return other + self._text if isinstance(other, str) else NotImplemented


def template_messages(messages: list[Message]) -> list[dict]:
    """The conversation as the dicts a template reads (then normalized as below):
    - text parts joined with "\\n" as ``content``; a turn without text has "", or None when it
      makes calls (which of the two the template takes is the polyfill's business);
    - reasoning parts as ``reasoning_content`` (joined with "\\n");
    - calls as ``tool_calls`` with the client's ids, arguments a :class:`ToolArguments`;
    - a tool result as a ``tool`` turn (``tool_call_id``, ``name`` where known), an error
      result's text after "Error: ";
    - an image: the media marker (generation.MEDIA_MARKER) where it stands in the text, with no
      line break around it (as llama.cpp joins them); libmtmd puts the image there
      (prompt/media.py).
    """
    return [_template_message(m) for m in messages]


def _template_message(message: Message) -> dict:
    out: dict[str, Any] = {"role": message.role}
    if message.name is not None:
        out["name"] = message.name
    results = message.of(ToolResult)
    if results:
        result = results[0]
        if result.call_id is not None:
            out["tool_call_id"] = result.call_id
        if result.name is not None:
            out["name"] = result.name
        out["content"] = result_text(result)
        return out
    calls = message.of(ToolCall)
    shown = [p for p in message.parts if isinstance(p, (Text, Image, Audio))]
    out["content"] = join_with_images(shown) if shown else (None if calls else "")
    reasoning = message.of(Reasoning)
    if reasoning:
        out["reasoning_content"] = "\n".join(r.text for r in reasoning)
    if calls:
        out["tool_calls"] = [_template_call(c) for c in calls]
    return out


def _template_call(call: ToolCall) -> dict:
    arguments = call.arguments
    if isinstance(arguments, dict):
        # the model's calls are compact JSON: a template that shows the text repeats that form
        arguments = ToolArguments(arguments, call.text if call.text is not None else
                                  orjson.dumps(arguments).decode())
    out: dict[str, Any] = {"type": "function"}
    if call.id is not None:
        out["id"] = call.id
    out["function"] = {"name": call.name, "arguments": arguments}
    return out


def result_text(result: ToolResult) -> str:
    """A tool result's text as a template shows it; an error says so first."""
    if isinstance(result.content, str):
        text = result.content
    else:
        text = join_with_images(result.content)
    if result.is_error:
        return f"Error: {text}" if text else "Error"
    return text


def join_with_images(parts) -> str:
    """Text parts joined by line breaks; an image is the media marker, with no break beside it."""
    out = ""
    joined = False          # a line break goes between two text parts only
    for part in parts:
        if isinstance(part, (Image, Audio)):        # an audio clip stands where libmtmd puts it too
            out += MEDIA_MARKER
            joined = False
        else:
            out += ("\n" if joined else "") + part.text
            joined = True
    return out


def template_tools(tools: list[ToolDefinition]) -> list[dict]:
    """Tool definitions as templates read them: OpenAI's function tool objects."""
    return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                              "parameters": t.parameters}} for t in tools]


def normalize_messages(messages: list[dict]) -> list[dict]:
    """Chat message dicts (template_messages' output, the probe's) → the shape HF chat templates
    expect. Inputs are not mutated.

    - Keys whose value is None are dropped (templates test ``'tool_calls' in message``
      or ``is defined``), except ``content``, which every message then has: text,
      or None only on an assistant turn that makes tool calls and sent none (which of
      null and "" a template takes there is the probe's finding, applied by the
      polyfill); missing elsewhere becomes "".
    - A list of content parts becomes one string: the text parts joined with "\\n"
      (as vLLM and llama.cpp do). Any other part type → TemplateError.
    - An empty ``tool_calls`` list is dropped; each call's ``function.arguments``
      becomes a :class:`ToolArguments` (from a JSON object string or a dict; "" and
      None mean {}). A string that is not a JSON object stays a string. A call
      without ``type`` gets ``"function"``.
    - Role ``developer`` becomes ``system``: few templates know it.
    - Everything else (``tool_call_id``, ``name``, ``reasoning_content``) is kept as is.
    """
    if not isinstance(messages, list):
        raise TemplateError("messages must be a list")
    return [_normalize_message(m) for m in messages]


def _normalize_message(message: Any) -> dict:
    if not isinstance(message, dict):
        raise TemplateError("each message must be an object")
    out = {k: v for k, v in message.items() if v is not None}
    if out.get("role") == "developer":
        out["role"] = "system"
    content = out.get("content")
    if isinstance(content, list):
        content = join_text_parts(content)
    if out.get("tool_calls"):
        if not isinstance(out["tool_calls"], list):
            raise TemplateError("a message's tool_calls must be an array")
        out["tool_calls"] = [_normalize_tool_call(c) for c in out["tool_calls"]]
    else:
        out.pop("tool_calls", None)
    if out.get("role") == "assistant" and "tool_calls" in out and content is None:
        out["content"] = None
    else:
        out["content"] = "" if content is None else content
    return out


def join_text_parts(parts: list) -> str:
    texts = []
    for part in parts:
        if isinstance(part, str):
            texts.append(part)
        elif isinstance(part, dict) and part.get("type") in _TEXT_PART_TYPES:
            texts.append(str(part.get("text") or ""))
        else:
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise TemplateError(f"content part of type {kind!r} is not supported by this model")
    return "\n".join(texts)


def _normalize_tool_call(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    function = dict(call["function"])
    function["arguments"] = _tool_arguments(function.get("arguments"))
    return {"type": "function", **call, "function": function}


def _tool_arguments(value: Any) -> Any:
    if isinstance(value, ToolArguments):
        return value
    if value is None or (isinstance(value, str) and not value.strip()):
        return ToolArguments({}, "{}")
    if isinstance(value, dict):
        return ToolArguments(value, _tojson(value))
    if isinstance(value, str):
        parsed = json_object(value)
        if parsed is not None:
            return ToolArguments(parsed, value)
    return value


# --- system turns after the first message --------------------------------------
# Anthropic (and OpenAI's developer messages) allow instructions in the middle of a
# conversation. Templates that take a system turn anywhere (ChatML, Qwen, Llama 3) get
# it as it is; for one that refuses it (Mistral) or drops it (one that keeps only
# the last system message), the turn becomes text of the user turn it follows.

def has_later_system_turns(messages: list[dict]) -> bool:
    return any(m.get("role") in ("system", "developer") for m in messages[1:])


def has_user_runs(messages: list[dict]) -> bool:
    """Whether two user messages follow each other (fold_system_turns joins them)."""
    return any(a.get("role") == b.get("role") == "user" for a, b in zip(messages, messages[1:]))


def shows_every_system_turn(messages: list[dict], render: Callable[[list[dict]], str]) -> bool:
    """Whether `render` shows every system message: with a private-use mark in place of each one's
    text (which could appear elsewhere in the conversation), the prompt holds every mark."""
    marks = {i: f"\ue001{i}\ue001" for i, m in enumerate(messages) if m.get("role") in ("system", "developer")}
    try:
        text = render([{**m, "content": marks[i]} if i in marks else m for i, m in enumerate(messages)])
    except TemplateError:
        return False
    return all(mark in text for mark in marks.values())


def fold_system_turns(messages: list[dict]) -> list[dict]:
    """A leading system message stays; every later one becomes a user message (wrapped in
    <system> tags) merged with the user message before or after it."""
    out: list[dict] = []
    for i, message in enumerate(messages):
        if i > 0 and message.get("role") in ("system", "developer"):
            message = {"role": "user", "content": f"<system>\n{_system_text(message)}\n</system>"}
        last = out[-1] if out else None
        if last is not None and message.get("role") == "user" and last.get("role") == "user":
            out[-1] = {**last, "content": _joined(last.get("content"), message["content"])}
        else:
            out.append(message)
    return out


def _system_text(message: dict) -> str:
    content = message.get("content")
    return join_text_parts(content) if isinstance(content, list) else str(content or "")


def _joined(first: Any, second: str) -> str:
    first = join_text_parts(first) if isinstance(first, list) else str(first or "")
    return f"{first}\n\n{second}" if first else second
