"""Anthropic Messages request fields beside the messages: `tools` (server tools left out),
`tool_choice`, `output_config` (format and effort) and `thinking` (the reasoning budget)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...conversation import ToolDefinition
from ...prompt.build import ChatInput, ToolChoice
from .effort import DEFAULT_EFFORT, EFFORT_BUDGETS
from ..limits import MAX_INT_PARAM
from ..fields import invalid

# Tools Anthropic runs on its own servers (web search and fetch, code execution, tool
# search, MCP connectors, the advisor): nothing here can run them, so they are left out
# of the prompt, never an error; the response names them in a header.
SERVER_TOOL_PREFIXES = ("web_search_", "web_fetch_", "code_execution_", "tool_search_tool_", "advisor_",
                        "mcp_toolset")


def read_tools(tools: Any, ignored: list[str] | None = None) -> list[ToolDefinition]:
    """Anthropic custom tools → tool definitions (`strict: true` kept); the types of server
    tools left out are appended to `ignored`."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise invalid("tools", "expected an array")
    found: list[ToolDefinition] = []
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid(where, "expected an object")
        kind = tool.get("type")
        if isinstance(kind, str) and kind.startswith(SERVER_TOOL_PREFIXES):
            if ignored is not None and kind not in ignored:
                ignored.append(kind)
            continue
        if kind not in (None, "custom"):
            raise invalid(f"{where}.type", f"tool type '{kind}' is not supported; only custom tools "
                                           f"(name, description, input_schema) are")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise invalid(f"{where}.name", "expected a non-empty string")
        if any(t.name == name for t in found):
            raise invalid(f"{where}.name", f"tool names must be unique; '{name}' repeats")
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise invalid(f"{where}.input_schema", "expected a JSON schema object")
        description = tool.get("description") or ""
        if not isinstance(description, str):
            raise invalid(f"{where}.description", "expected a string")
        found.append(ToolDefinition(name, description, schema, strict=tool.get("strict") is True))
    return found


def read_tool_choice(value: Any, tools: list[ToolDefinition]) -> tuple[ToolChoice, bool]:
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
        if not isinstance(name, str) or name not in {t.name for t in tools}:
            raise invalid("tool_choice.name", f"names a tool that is not among the tools: {name!r}")
        return ToolChoice("named", name), not disable_parallel
    raise invalid("tool_choice.type", f"expected auto, any, tool or none; got {kind!r}")


def read_output_config(body: dict, chat: ChatInput) -> str | None:
    """Structured output (output_config.format, or the older output_format); returns the effort."""
    config = body.get("output_config")
    fmt, where, effort = None, "output_format", None
    if config is not None:
        if not isinstance(config, dict):
            raise invalid("output_config", "expected an object")
        effort = config.get("effort")
        if effort is not None:
            if not isinstance(effort, str):     # any string: a level newer than this server reads as the default
                raise invalid("output_config.effort", f"expected one of {', '.join(EFFORT_BUDGETS)}")
        fmt, where = config.get("format"), "output_config.format"
    if fmt is None:
        fmt, where = body.get("output_format"), "output_format"
    if fmt is not None:
        if not isinstance(fmt, dict) or fmt.get("type") != "json_schema" or not isinstance(fmt.get("schema"), dict):
            raise invalid(where, 'expected {"type": "json_schema", "schema": {...}}')
        chat.response_schema = fmt["schema"]
    return effort


@dataclass
class Thinking:
    budget: int | None = None        # reasoning tokens (None: unlimited)
    omitted: bool = False            # display "omitted": thinking blocks carry only the signature


def read_thinking(value: Any, effort: str | None, template_kwargs: dict) -> Thinking:
    """The reasoning budget and display; sets enable_thinking for the template unless
    chat_template_kwargs already does. `budget_tokens` is the budget when given; otherwise
    the effort (output_config.effort; adaptive thinking defaults to high) sets it."""
    effort_budget = EFFORT_BUDGETS.get(effort, EFFORT_BUDGETS[DEFAULT_EFFORT]) if effort else None
    if value is None:
        return Thinking(effort_budget)
    if not isinstance(value, dict):
        raise invalid("thinking", "expected an object with a 'type'")
    kind = value.get("type")
    if kind == "disabled":
        template_kwargs.setdefault("enable_thinking", False)
        return Thinking()
    display = value.get("display")       # summarized, omitted, or a newer mode: shown as summarized
    if display is not None and not isinstance(display, str):
        raise invalid("thinking.display", "expected summarized or omitted")
    template_kwargs.setdefault("enable_thinking", True)
    if kind == "adaptive":
        budget = effort_budget if effort else EFFORT_BUDGETS[DEFAULT_EFFORT]
    elif kind == "enabled":
        budget = value.get("budget_tokens")
        if isinstance(budget, bool) or not isinstance(budget, int) or not 1 <= budget <= MAX_INT_PARAM:
            raise invalid("thinking.budget_tokens", f"expected a positive integer of at most {MAX_INT_PARAM}")
    else:
        raise invalid("thinking.type", f"expected enabled, disabled or adaptive; got {kind!r}")
    return Thinking(budget, display == "omitted")


INTERLEAVED_THINKING_BETA = "interleaved-thinking-"


def check_budget_below_max_tokens(value: Any, max_tokens: int, betas: str | None) -> None:
    """Anthropic's rule: an enabled thinking's budget_tokens is less than max_tokens (the thinking
    is part of the output), except under the interleaved-thinking beta, where the budget spans
    every thinking block of the turn (Claude Code sends it)."""
    if not isinstance(value, dict) or value.get("type") != "enabled" or INTERLEAVED_THINKING_BETA in (betas or ""):
        return
    budget = value.get("budget_tokens")
    if isinstance(budget, int) and budget >= max_tokens:
        raise invalid("thinking.budget_tokens", f"must be less than max_tokens ({max_tokens}), got {budget}")
