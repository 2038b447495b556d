"""Making up for what a chat template cannot show, from its probed capabilities.

The messages reach the template rewritten, never the client's view of them: a client sees its
own ids, its own turns. Each step applies only where the probe found the template lacking:

- call ids: a template that insists on nine letters and digits (Mistral) gets each id in that
  form, the same one every turn (``toolu_aB3dE5gH7`` and ``call_aB3dE5gH7`` become the model's
  own ``aB3dE5gH7``; any other id a stable hash of it);
- parallel calls: a template that shows one call per turn gets one assistant turn per call,
  each followed by its result;
- tool definitions: where a template needs every parameter described (Command R+ adds each
  description to a string), a parameter without one gets an empty one;
- tools, calls and results a template never shows are written out as text: the definitions in
  the system turn, each call after the turn's text, in the words of the family the model writes
  (:mod:`.calls_text`: LFM2's ``<|tool_call_start|>[fn(…)]``, DeepSeek's tool-call blocks; a
  ``<tool_call>`` JSON object where the family has none of its own), each result as a
  ``<tool_response>`` in a user turn;
- content: null or "" on a tool-call turn, whichever the template takes (DeepSeek's test
  ``content is none``; Qwen3's and gpt-oss' do string operations on it);
- reasoning under the field name the template reads (gpt-oss' ``thinking``);
- a system turn, where the system role is refused (or, as Mistral's, shown only in a last user
  turn the conversation does not end with), opens the first user turn.
"""

from __future__ import annotations

import hashlib
import re

from ..parsing.tool_families import ToolSyntax
from .calls_text import family_calls_text
from .jinja_env import tojson
from .messages import fold_system_turns, join_text_parts
from .probe import TemplateCaps

__all__ = ["fit_to_template", "template_call_id", "tools_as_text"]

_ALNUM9 = re.compile(r"[A-Za-z0-9]{9}")
_BASE62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def fit_to_template(messages: list[dict], tools: list[dict] | None, caps: TemplateCaps,
                    family: ToolSyntax | None = None) -> tuple[list[dict], list[dict] | None]:
    """Normalized messages and OpenAI tool objects → the ones this template is handed; calls and
    tools written as text are in `family`'s words (None: Hermes markup)."""
    if not caps.renders:
        return messages, tools
    if caps.call_ids == "alnum9":
        messages = _map_call_ids(messages)
    if not caps.parallel_tool_calls and caps.tool_calls:
        messages = _one_call_per_turn(messages)
    if tools and caps.needs_descriptions:
        tools = [_described(t) for t in tools]
    if tools and not caps.tools:
        messages = _with_tools_text(messages, tools, family)
        tools = None
    if not caps.tool_calls:
        messages = [_calls_as_text(m, family) for m in messages]
    if not caps.tool_results:
        messages = _results_as_user_turns(messages)
    messages = [_content_it_takes(m, caps) for m in messages]
    if caps.reasoning_field != "reasoning_content":
        messages = [_reasoning_as(caps.reasoning_field, m) for m in messages]
    if not caps.system_role or (not caps.system_after_calls and messages and messages[-1].get("role") != "user"):
        messages = _system_into_first_user_turn(fold_system_turns(messages))
    return messages, tools


def template_call_id(call_id: str) -> str:
    """A client's call id as nine letters and digits: itself, its random part, or a hash of it."""
    if _ALNUM9.fullmatch(call_id):
        return call_id
    tail = call_id.rsplit("_", 1)[-1]
    if _ALNUM9.fullmatch(tail):
        return tail
    number = int.from_bytes(hashlib.sha256(call_id.encode()).digest()[:8], "big")
    digits = []
    for _ in range(9):
        number, digit = divmod(number, 62)
        digits.append(_BASE62[digit])
    return "".join(digits)


def _map_call_ids(messages: list[dict]) -> list[dict]:
    mapped: dict[str, str] = {}
    used: set[str] = set()

    def fit(call_id: object) -> object:
        if not isinstance(call_id, str):
            return call_id
        if call_id not in mapped:
            new = template_call_id(call_id)
            if new in used:     # two ids of one conversation with the same random part
                new = template_call_id(call_id + "#")
            mapped[call_id] = new
            used.add(new)
        return mapped[call_id]

    out = []
    for message in messages:
        if message.get("tool_calls"):
            calls = [{**c, "id": fit(c["id"])} if isinstance(c, dict) and "id" in c else c
                     for c in message["tool_calls"]]
            message = {**message, "tool_calls": calls}
        if "tool_call_id" in message:
            message = {**message, "tool_call_id": fit(message["tool_call_id"])}
        out.append(message)
    return out


def _one_call_per_turn(messages: list[dict]) -> list[dict]:
    """An assistant turn with several calls → a turn per call, each followed by its result."""
    out: list[dict] = []
    i = 0
    while i < len(messages):
        message = messages[i]
        calls = message.get("tool_calls") or []
        if message.get("role") != "assistant" or len(calls) < 2:
            out.append(message)
            i += 1
            continue
        j = i + 1
        while j < len(messages) and messages[j].get("role") == "tool":
            j += 1
        results = list(messages[i + 1:j])
        for n, call in enumerate(calls):
            out.append({**message, "content": message.get("content") if n == 0 else "", "tool_calls": [call]})
            result = _result_for(call, n, results)
            if result is not None:
                out.append(result)
        out.extend(results)     # results no call claimed stay, after the last call
        i = j
    return out


def _result_for(call: dict, n: int, results: list[dict]) -> dict | None:
    call_id = call.get("id") if isinstance(call, dict) else None
    for k, result in enumerate(results):
        if call_id is not None and result.get("tool_call_id") == call_id:
            return results.pop(k)
    if results and all("tool_call_id" not in r for r in results):
        return results.pop(0)
    return None


def _described(tool: dict) -> dict:
    """The tool with a description ("" where it has none) on itself and each of its parameters."""
    function = tool.get("function") if isinstance(tool, dict) else None
    if not isinstance(function, dict):
        return tool
    params = function.get("parameters")
    props = params.get("properties") if isinstance(params, dict) else None
    if isinstance(props, dict):
        props = {k: {"description": "", **p} if isinstance(p, dict) else p for k, p in props.items()}
        function = {**function, "parameters": {**params, "properties": props}}
    return {**tool, "function": {"description": "", **function}}


def tools_as_text(tools: list[dict], family: ToolSyntax | None = None) -> str:
    """Tool definitions as a system prompt says them to a template that cannot, with how to call
    one in `family`'s words (Hermes markup where it has none of its own)."""
    lines = "\n".join(tojson(t) for t in tools)
    head = ("# Tools\n\nYou can call these functions; their signatures are inside <tools></tools>:\n"
            f"<tools>\n{lines}\n</tools>\n\n")
    example = family_calls_text(family, [("function_name", {"argument": "value"}, "call0abcd")])
    if example is not None:
        return head + f"To call one, write its name and arguments like this:\n{example}"
    return head + ("To call one, write a JSON object with its name and arguments inside "
                   "<tool_call></tool_call> tags:\n<tool_call>\n"
                   '{"name": "<function name>", "arguments": {<arguments as JSON>}}\n</tool_call>')


def _with_tools_text(messages: list[dict], tools: list[dict], family: ToolSyntax | None) -> list[dict]:
    text = tools_as_text(tools, family)
    if messages and messages[0].get("role") == "system":
        first = messages[0]
        own = _text(first.get("content"))
        return [{**first, "content": f"{own}\n\n{text}" if own else text}, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def _calls_as_text(message: dict, family: ToolSyntax | None) -> dict:
    calls = message.get("tool_calls")
    if not calls:
        return message
    functions = [c.get("function", c) if isinstance(c, dict) else {} for c in calls]
    native = family_calls_text(family, [(f.get("name"), f.get("arguments"), str(c.get("id") or f"call{n}"))
                                        for n, (c, f) in enumerate(zip(calls, functions))])
    written = [native] if native is not None else [_call_text(c) for c in calls]
    own = _text(message.get("content"))
    out = {k: v for k, v in message.items() if k != "tool_calls"}
    out["content"] = "\n".join([own, *written] if own else written)
    return out


def _call_text(call: dict) -> str:
    function = call.get("function", call) if isinstance(call, dict) else {}
    arguments = function.get("arguments")
    body = {"name": function.get("name"), "arguments": arguments if isinstance(arguments, dict) else str(arguments)}
    return f"<tool_call>\n{tojson(body)}\n</tool_call>"


def _results_as_user_turns(messages: list[dict]) -> list[dict]:
    out: list[dict] = []
    for message in messages:
        if message.get("role") == "tool":
            message = {"role": "user", "content": f"<tool_response>\n{_text(message.get('content'))}\n</tool_response>"}
        if out and message.get("role") == "user" and out[-1].get("role") == "user":
            out[-1] = {**out[-1], "content": f"{_text(out[-1].get('content'))}\n{message['content']}"}
        else:
            out.append(message)
    return out


def _content_it_takes(message: dict, caps: TemplateCaps) -> dict:
    content = message.get("content")
    if message.get("tool_calls") and not content:
        wanted = None if caps.null_content and not caps.empty_content else ""
        return message if content is wanted else {**message, "content": wanted}
    return {**message, "content": ""} if content is None else message


def _reasoning_as(field: str, message: dict) -> dict:
    """reasoning_content under the name the template reads (gpt-oss: ``thinking``), where it may
    stand: gpt-oss refuses both text and thinking on a tool-call turn."""
    if "reasoning_content" not in message or field in message:
        return message
    if message.get("tool_calls") and message.get("content"):
        return message
    return {**message, field: message["reasoning_content"]}


def _system_into_first_user_turn(messages: list[dict]) -> list[dict]:
    if not messages or messages[0].get("role") != "system":
        return messages
    system = _text(messages[0].get("content"))
    rest = messages[1:]
    for i, message in enumerate(rest):
        if message.get("role") == "user":
            own = _text(message.get("content"))
            return [*rest[:i], {**message, "content": f"{system}\n\n{own}" if own else system}, *rest[i + 1:]]
    return [{"role": "user", "content": system}, *rest]


def _text(content: object) -> str:
    return join_text_parts(content) if isinstance(content, list) else str(content or "")
