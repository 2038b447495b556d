"""Anthropic Messages input → the OpenAI-style chat every template is rendered from.

- `system` (a string or text blocks) becomes a leading system message.
- A user turn's `tool_result` blocks become role "tool" messages (in order, before the
  turn's text), with `tool_call_id` and the result's text; `is_error` results say so.
- An assistant turn's `tool_use` blocks become `tool_calls` (arguments as JSON text), its
  `thinking` blocks `reasoning_content` (the template decides whether to show it) once
  their signatures verify: a thinking block this server did not sign is a 400.
- `tools` (`input_schema`) become function definitions; `tool_choice` any/tool/none map to
  required/named/none; `thinking` sets the budget and the template's enable_thinking;
  `output_config.format` (a JSON schema) constrains the answer, `output_config.effort` is
  passed to the template as reasoning_effort.
Consecutive user turns are merged, as Anthropic does, so strict templates see alternation.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..prompt import ChatInput, ToolChoice
from ..signing import verify
from ..settings import MAX_INT_PARAM
from .common import invalid, read_template_kwargs

TEXT_ONLY = "this server takes text only"


def read_chat(body: dict, signing_key: bytes) -> ChatInput:
    messages = read_system(body.get("system")) + read_messages(body.get("messages"), signing_key)
    tools = read_tools(body.get("tools"))
    choice, parallel = read_tool_choice(body.get("tool_choice"), tools)
    kwargs = read_template_kwargs(body)
    budget = read_thinking(body.get("thinking"), kwargs)
    chat = ChatInput(messages=messages, tools=tools, tool_choice=choice, parallel_tool_calls=parallel,
                     template_kwargs=kwargs, reasoning_budget=budget)
    read_output_config(body, chat)
    return chat


def read_system(system: Any) -> list[dict]:
    if system is None:
        return []
    if isinstance(system, str):
        text = system
    elif isinstance(system, list):
        text = "\n".join(_text_of(block, f"system[{i}]") for i, block in enumerate(system))
    else:
        raise invalid("system", "expected a string or an array of text blocks")
    return [{"role": "system", "content": text}] if text else []


def read_messages(messages: Any, signing_key: bytes) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise invalid("messages", "expected a non-empty array of messages")
    out: list[dict] = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid(where, "expected an object")
        role = message.get("role")
        content = message.get("content")
        if isinstance(content, str):
            blocks: list = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            blocks = content
        else:
            raise invalid(f"{where}.content", "expected a string or an array of content blocks")
        if role == "user":
            converted = _user_turn(blocks, f"{where}.content")
        elif role == "assistant":
            converted = [_assistant_turn(blocks, f"{where}.content", signing_key)]
        else:
            raise invalid(f"{where}.role", "expected user or assistant (the system prompt goes in 'system')")
        for msg in converted:
            _append(out, msg)
    return out


def _append(out: list[dict], msg: dict) -> None:
    last = out[-1] if out else None
    if last is not None and msg["role"] == "user" and last["role"] == "user":
        last["content"] = "\n".join(t for t in (last["content"], msg["content"]) if t)
    else:
        out.append(msg)


def _user_turn(blocks: list, where: str) -> list[dict]:
    results: list[dict] = []
    texts: list[str] = []
    for j, block in enumerate(blocks):
        kind = _block_type(block, f"{where}[{j}]")
        if kind == "text":
            texts.append(_text_of(block, f"{where}[{j}]"))
        elif kind == "tool_result":
            results.append(_tool_result(block, f"{where}[{j}]"))
        elif kind in ("tool_use", "thinking", "redacted_thinking"):
            raise invalid(f"{where}[{j}]", f"a {kind} block belongs in an assistant message")
        else:
            raise _unsupported(kind, f"{where}[{j}]")
    if texts or not results:
        results.append({"role": "user", "content": "\n".join(texts)})
    return results


def _tool_result(block: dict, where: str) -> dict:
    call_id = block.get("tool_use_id")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.tool_use_id", "expected the id of the tool_use this answers")
    content = block.get("content")
    if content is None:
        text = ""
    elif isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            kind = _block_type(part, f"{where}.content[{k}]")
            if kind != "text":
                raise _unsupported(kind, f"{where}.content[{k}]")
            parts.append(_text_of(part, f"{where}.content[{k}]"))
        text = "\n".join(parts)
    else:
        raise invalid(f"{where}.content", "expected a string or an array of text blocks")
    is_error = block.get("is_error")
    if is_error is not None and not isinstance(is_error, bool):
        raise invalid(f"{where}.is_error", "expected a boolean")
    if is_error:
        text = f"Error: {text}" if text else "Error"
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def _assistant_turn(blocks: list, where: str, signing_key: bytes) -> dict:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict] = []
    for j, block in enumerate(blocks):
        at = f"{where}[{j}]"
        kind = _block_type(block, at)
        if kind == "text":
            texts.append(_text_of(block, at))
        elif kind == "thinking":
            reasoning.append(_verified_thinking(block, at, signing_key))
        elif kind == "redacted_thinking":
            raise invalid(at, "redacted_thinking blocks are not produced by this server and cannot be verified")
        elif kind == "tool_use":
            calls.append(_tool_use(block, at))
        elif kind == "tool_result":
            raise invalid(at, "a tool_result block belongs in a user message")
        else:
            raise _unsupported(kind, at)
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if reasoning:
        message["reasoning_content"] = "\n".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _verified_thinking(block: dict, where: str, signing_key: bytes) -> str:
    thinking = block.get("thinking")
    if not isinstance(thinking, str):
        raise invalid(f"{where}.thinking", "expected a string")
    if not verify(signing_key, thinking, block.get("signature")):
        raise invalid(f"{where}.signature", "the thinking block's signature does not match its text; "
                                            "send thinking blocks back exactly as this server returned them")
    return thinking


def _tool_use(block: dict, where: str) -> dict:
    call_id, name, arguments = block.get("id"), block.get("name"), block.get("input")
    if not isinstance(call_id, str) or not call_id:
        raise invalid(f"{where}.id", "expected a string")
    if not isinstance(name, str) or not name:
        raise invalid(f"{where}.name", "expected a string")
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise invalid(f"{where}.input", "expected an object")
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(arguments).decode()}}


def _block_type(block: Any, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise invalid(where, "expected a content block: an object with a 'type'")
    return block["type"]


def _text_of(block: Any, where: str) -> str:
    kind = _block_type(block, where)
    if kind != "text":
        raise _unsupported(kind, where)
    text = block.get("text")
    if not isinstance(text, str):
        raise invalid(f"{where}.text", "expected a string")
    return text


def _unsupported(kind: str, where: str):
    return invalid(where, f"content blocks of type '{kind}' are not supported; {TEXT_ONLY}")


# ---- tools and thinking -------------------------------------------------------------

def read_tools(tools: Any) -> list[dict]:
    """Anthropic custom tools → function definitions {"name", "description", "parameters"}."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid("tools", "expected an array")
    found: list[dict] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid(where, "expected an object")
        kind = tool.get("type")
        if kind not in (None, "custom"):
            raise invalid(f"{where}.type", f"tool type '{kind}' is not supported; only custom tools "
                                           f"(name, description, input_schema) are")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(f"{where}.name", "expected a non-empty string")
        if any(t["name"] == name for t in found):
            raise invalid(f"{where}.name", f"tool names must be unique; '{name}' repeats")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise invalid(f"{where}.input_schema", "expected a JSON schema object")
        description = tool.get("description") or ""
        if not isinstance(description, str):
            raise invalid(f"{where}.description", "expected a string")
        found.append({"name": name, "description": description, "parameters": schema})
    return found


def read_tool_choice(value: Any, tools: list[dict]) -> tuple[ToolChoice, bool]:
    """(the choice, whether parallel calls are allowed)."""
    if value is None:
        return ToolChoice("auto"), True
    if not isinstance(value, dict):
        raise invalid("tool_choice", "expected an object with a 'type'")
    kind = value.get("type")
    disable_parallel = value.get("disable_parallel_tool_use", False)
    if not isinstance(disable_parallel, bool):
        raise invalid("tool_choice.disable_parallel_tool_use", "expected a boolean")
    if kind == "none":
        return ToolChoice("none"), True
    if kind == "auto":
        return ToolChoice("auto"), not disable_parallel
    if kind in ("any", "tool") and not tools:
        raise invalid("tool_choice", f"'{kind}' needs at least one tool in 'tools'")
    if kind == "any":
        return ToolChoice("required"), not disable_parallel
    if kind == "tool":
        name = value.get("name")
        if not isinstance(name, str) or name not in {t["name"] for t in tools}:
            raise invalid("tool_choice.name", f"names a tool that is not among the tools: {name!r}")
        return ToolChoice("named", name), not disable_parallel
    raise invalid("tool_choice.type", f"expected auto, any, tool or none; got {kind!r}")


def read_output_config(body: dict, chat: ChatInput) -> None:
    """Structured output (output_config.format, or the older output_format) and effort."""
    config = body.get("output_config")
    fmt, where = None, "output_format"
    if config is not None:
        if not isinstance(config, dict):
            raise invalid("output_config", "expected an object")
        effort = config.get("effort")
        if effort is not None:
            if not isinstance(effort, str):
                raise invalid("output_config.effort", "expected a string")
            chat.template_kwargs.setdefault("reasoning_effort", effort)
        fmt, where = config.get("format"), "output_config.format"
    if fmt is None:
        fmt, where = body.get("output_format"), "output_format"
    if fmt is None:
        return
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
        raise invalid(where, 'expected {"type": "json_schema", "schema": {...}}')
    chat.response_schema = fmt["schema"]


def read_thinking(value: Any, template_kwargs: dict) -> int | None:
    """The reasoning budget in tokens (None: unlimited); sets enable_thinking for the template
    unless chat_template_kwargs already does."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise invalid("thinking", "expected an object with a 'type'")
    kind = value.get("type")
    if kind == "disabled":
        template_kwargs.setdefault("enable_thinking", False)
        return None
    if kind == "adaptive":
        template_kwargs.setdefault("enable_thinking", True)
        return None
    if kind != "enabled":
        raise invalid("thinking.type", f"expected enabled, disabled or adaptive; got {kind!r}")
    budget = value.get("budget_tokens")
    if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= MAX_INT_PARAM:
        raise invalid("thinking.budget_tokens", f"expected a positive integer of at most {MAX_INT_PARAM}")
    template_kwargs.setdefault("enable_thinking", True)
    return budget
