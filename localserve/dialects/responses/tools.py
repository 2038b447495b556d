"""Responses tools: every tool type a client sends, as the function tools a chat template
renders, and the way back from a call the model makes to the output item the API returns.

- `function`: as it is.
- `namespace`: a named group of function (or custom) tools. Each is rendered under its
  qualified name `NAMESPACE.NAME` (function names cannot hold a dot, so no plain function
  collides with it); a call comes back as a `function_call` with the tool's own `name` and a
  `namespace` field, as OpenAI returns it.
- `custom` (freeform): rendered as a function taking one string, `input`; a call comes back
  as a `custom_tool_call` whose `input` is that string. Its grammar (Lark or regex) constrains
  a forced call: see `constrain`.
- `local_shell`: rendered as a function `local_shell` taking the command as an argv array;
  a call comes back as a `local_shell_call` with an `exec` action.
- Hosted tools (web search, file search, image generation, code interpreter, computer use,
  remote MCP, tool search) cannot run on this machine: they are left out of the prompt and
  reported by type in `ignored`; the handler says so in a header and a log line.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ...conversation import ToolDefinition
from ...errors import ApiError
from ...parsing.json_stream import strict_loads
from ...grammar.lark_regex import LarkError, lark_to_regex
from ...prompt.build import ToolChoice
from ..fields import invalid
from ..function_tools import function_definitions

HOSTED_TOOL_TYPES = ("web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11",
                     "file_search", "image_generation", "code_interpreter", "computer_use",
                     "computer_use_preview", "computer", "mcp", "tool_search")
HOSTED_SUMMARY = "web_search*, file_search, image_generation, code_interpreter, computer_use*, mcp, tool_search"
LOCAL_SHELL = "local_shell"
CUSTOM_INPUT = "input"
_LOCAL_SHELL_PARAMETERS = {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}, "description": "The command as an argv array."},
        "workdir": {"type": "string", "description": "The working directory."},
        "timeout_ms": {"type": "integer", "description": "A timeout in milliseconds."},
    },
    "required": ["command"],
}


@dataclass(frozen=True)
class ToolKind:
    """What a name the model calls stands for."""
    kind: str                    # function | custom | local_shell
    name: str                    # the tool's own name
    namespace: str | None = None
    format: dict | None = None   # a custom tool's input format


@dataclass
class ResponseTools:
    definitions: list[ToolDefinition] = field(default_factory=list)   # names qualified
    echo: list[dict] = field(default_factory=list)          # as the Response object lists them
    kinds: dict[str, ToolKind] = field(default_factory=dict)  # qualified name -> kind
    ignored: list[str] = field(default_factory=list)        # hosted tool types left out


def qualified(name: str, namespace: str | None) -> str:
    return f"{namespace}.{name}" if namespace else name


def read_tools(body: dict) -> ResponseTools:
    tools = body.get("tools")
    found = ResponseTools()
    if tools is None:
        return found
    if not isinstance(tools, list):
        raise invalid("tools", "expected an array")
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise invalid(where, "expected an object")
        kind = tool.get("type", "function")
        if not isinstance(kind, str):
            raise invalid(f"{where}.type", "expected a string")
        if kind in HOSTED_TOOL_TYPES or kind.startswith(("web_search", "computer_use")):
            if kind not in found.ignored:
                found.ignored.append(kind)
            found.echo.append(tool)
        elif kind == "namespace":
            _namespace(found, tool, where)
        else:
            _add(found, tool, where, None)
            found.echo.append(_echo(tool))
    names = [d.name for d in found.definitions]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise invalid("tools", f"tool names must be unique; {duplicates[0]!r} appears more than once")
    return found


def _namespace(found: ResponseTools, tool: dict, where: str) -> None:
    name = tool.get("name")
    if not isinstance(name, str) or not name or "." in name:
        raise invalid(f"{where}.name", "a namespace needs a name without '.'")
    members = tool.get("tools")
    if not isinstance(members, list):
        raise invalid(f"{where}.tools", "expected an array of function or custom tools")
    for j, member in enumerate(members):
        if not isinstance(member, dict) or member.get("type", "function") not in ("function", "custom"):
            raise invalid(f"{where}.tools[{j}]", "a namespace holds function and custom tools only")
        _add(found, member, f"{where}.tools[{j}]", name)
    found.echo.append({**tool, "description": tool.get("description") or "",
                       "tools": [_echo(m) for m in members]})


def _add(found: ResponseTools, tool: dict, where: str, namespace: str | None) -> None:
    kind = tool.get("type", "function")
    if kind == "function":
        definition = function_definitions([tool], where)[0]
        if "." in definition.name:
            raise invalid(f"{where}.name", "a function name cannot contain '.'")
        definition = dataclasses.replace(definition, name=qualified(definition.name, namespace),
                                         strict=tool.get("strict") is True)
        found.kinds[definition.name] = ToolKind("function", tool["name"], namespace)
    elif kind == "custom":
        definition = _custom(tool, where, namespace)
        found.kinds[definition.name] = ToolKind("custom", tool["name"], namespace, tool.get("format"))
    elif kind == LOCAL_SHELL:
        definition = ToolDefinition(LOCAL_SHELL, "Runs a shell command on the user's machine.",
                                    _LOCAL_SHELL_PARAMETERS)
        found.kinds[LOCAL_SHELL] = ToolKind(LOCAL_SHELL, LOCAL_SHELL)
    else:
        raise ApiError(400, f"invalid '{where}.type': tool type '{kind}' is not supported; this server takes "
                            f"function, namespace, custom and local_shell tools, and leaves out hosted tools "
                            f"({HOSTED_SUMMARY})",
                       param="tools", code="unsupported_value")
    found.definitions.append(definition)


def _custom(tool: dict, where: str, namespace: str | None) -> ToolDefinition:
    name = tool.get("name")
    if not isinstance(name, str) or not name or "." in name:
        raise invalid(f"{where}.name", "a custom tool needs a name without '.'")
    fmt = tool.get("format")
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "grammar":
            if fmt.get("syntax") not in ("lark", "regex") or not isinstance(fmt.get("definition"), str):
                raise invalid(f"{where}.format", "a grammar format needs syntax lark or regex and a definition")
        elif kind != "text":
            raise invalid(f"{where}.format.type", f"expected text or grammar, got {kind!r}")
    description = tool.get("description") or ""
    return ToolDefinition(qualified(name, namespace),
                          f"{description}\n(Freeform tool: put the raw text in '{CUSTOM_INPUT}'.)".strip(),
                          {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}},
                           "required": [CUSTOM_INPUT]})


def _echo(tool: dict) -> dict:
    if tool.get("type", "function") != "function":
        return tool
    strict = tool.get("strict")
    return {"type": "function", "name": tool.get("name"), "description": tool.get("description") or None,
            "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            "strict": strict if isinstance(strict, bool) else None}


def read_tool_choice(value: Any, tools: ResponseTools) -> tuple[ToolChoice, Any]:
    if value is None:
        return ToolChoice("auto"), "auto"
    if isinstance(value, str):
        if value not in ("none", "auto", "required"):
            raise invalid("tool_choice", f"expected none, auto, required or a function; got '{value}'")
        if value == "required" and not tools.definitions:
            raise invalid("tool_choice", "'required' needs at least one tool")
        return ToolChoice(value), value
    if not isinstance(value, dict):
        raise invalid("tool_choice", "expected a string or an object")
    kind = value.get("type")
    if kind in ("function", "custom", LOCAL_SHELL):
        name = LOCAL_SHELL if kind == LOCAL_SHELL else value.get("name")
        target = _choice_target(tools, kind, name, value.get("namespace"))
        if target is None:
            raise invalid("tool_choice", f"names a {kind} tool that is not among the tools: {name!r}")
        return ToolChoice("named", target), value
    raise ApiError(400, f"invalid 'tool_choice': tool_choice type '{kind}' is not supported; use none, auto, "
                        f"required or {{\"type\": \"function\" | \"custom\", \"name\": ...}}",
                   param="tool_choice", code="unsupported_value")


def _choice_target(tools: ResponseTools, kind: str, name: Any, namespace: Any) -> str | None:
    if not isinstance(name, str):
        return None
    found = tools.kinds.get(name)
    if found is not None and found.kind == kind:
        return name
    matches = [q for q, k in tools.kinds.items()
               if k.kind == kind and k.name == name and namespace in (None, k.namespace)]
    return matches[0] if len(matches) == 1 else None


def constrain(tools: ResponseTools, choice: ToolChoice) -> None:
    """For a forced call, hold each custom tool that may be called to its grammar: a string
    pattern on `input`, which the forced-call grammar then enforces. A grammar that cannot be
    converted is a 400 naming the tool, never a silently unconstrained call."""
    if choice.mode not in ("required", "named"):
        return
    for i, definition in enumerate(tools.definitions):
        kind = tools.kinds.get(definition.name)
        if kind is None or kind.kind != "custom" or (choice.mode == "named" and choice.name != definition.name):
            continue
        fmt = kind.format or {}
        if fmt.get("type") != "grammar":
            continue
        try:
            pattern = lark_to_regex(fmt["definition"], "grammar") if fmt["syntax"] == "lark" \
                else fmt["definition"]
        except LarkError as exc:
            raise ApiError(400, f"custom tool '{kind.name}': its lark grammar cannot be enforced here: {exc}",
                           param="tools", code="invalid_grammar") from None
        schema = {"type": "string", "pattern": f"^(?:{pattern})$"}
        tools.definitions[i] = dataclasses.replace(
            definition, parameters={**definition.parameters, "properties": {CUSTOM_INPUT: schema}})


# ---- calls back into output items -----------------------------------------------------

def shell_action(arguments: str) -> dict:
    """A local_shell call's `exec` action from the arguments the model wrote."""
    try:
        value = strict_loads(arguments) if arguments else {}
    except ValueError:
        value = {}
    value = value if isinstance(value, dict) else {}
    command = value.get("command")
    if isinstance(command, str):
        command = ["bash", "-lc", command]
    action: dict = {"type": "exec", "command": [str(c) for c in command] if isinstance(command, list) else [],
                    "env": {}, "timeout_ms": None, "user": None, "working_directory": None}
    if isinstance(value.get("timeout_ms"), int) and not isinstance(value.get("timeout_ms"), bool):
        action["timeout_ms"] = value["timeout_ms"]
    if isinstance(value.get("workdir"), str):
        action["working_directory"] = value["workdir"]
    return action


def shell_arguments(action: dict) -> dict:
    """The arguments a local_shell call's action was generated from (for history)."""
    out: dict = {"command": action.get("command") or []}
    if action.get("working_directory"):
        out["workdir"] = action["working_directory"]
    if action.get("timeout_ms") is not None:
        out["timeout_ms"] = action["timeout_ms"]
    return out
