"""Forced tool calls as GBNF: one grammar per model family's tool-call syntax, each call's
arguments held to its function's parameters schema (through GrammarBuilder)."""

from __future__ import annotations

from .gbnf import SchemaError, group, json_text
from .schema import GrammarBuilder

TOOL_CALL_SYNTAXES = ("hermes", "qwen3_coder", "llama3", "mistral", "deepseek", "harmony", "json")
_FRAMES = {  # syntax: (before the calls, between two calls, after the calls)
    "hermes": ("", "\n", ""), "qwen3_coder": ("", "\n", ""), "llama3": ("", "; ", ""),
    "mistral": ("[TOOL_CALLS][", ", ", "]"), "harmony": ("", "", ""),
    "deepseek": ("<｜tool▁calls▁begin｜>", "\n", "<｜tool▁calls▁end｜>"),
    "json": ('{"tool_calls": [', ", ", "]}"),
}
_CALLS = {  # syntax: (text before the arguments, text after); {name} raw, {jname} as JSON
    "hermes": ('<tool_call>\n{{"name": {jname}, "arguments": ', "}\n</tool_call>"),
    "llama3": ('{{"name": {jname}, "parameters": ', "}"),
    "mistral": ('{{"name": {jname}, "arguments": ', "}"),
    "deepseek": ("<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n", "\n```<｜tool▁call▁end｜>"),
    "harmony": ("<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>", "<|call|>"),
    "json": ('{{"name": {jname}, "arguments": ', "}"),
}


def tool_call_grammar(syntax: str, tools: list[dict], *, parallel: bool,
                      forced_name: str | None = None, prefix: str = "") -> str:
    """A grammar that forces one (with parallel: one or more) calls of ``tools``, written in
    ``syntax`` after the literal ``prefix``. With forced_name only that function. ``harmony``
    makes one call even with parallel. Tools are OpenAI function definitions, unwrapped."""
    if syntax not in TOOL_CALL_SYNTAXES:
        raise ValueError(f"unknown tool-call syntax {syntax!r}")
    if forced_name is not None:
        tools = [t for t in tools if isinstance(t, dict) and t.get("name") == forced_name]
        if not tools:
            raise SchemaError(f"function {forced_name!r} is not among the tools")
    if not tools:
        raise SchemaError("there are no tools to call")
    b = GrammarBuilder()
    calls = []
    for i, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not name:
            raise SchemaError(f"tools[{i}]: a function needs a name")
        params, path = tool.get("parameters") or {"type": "object", "properties": {}}, f"tools[{i}].parameters"
        if syntax == "qwen3_coder":
            calls.append(_xml_call(b, name, params, path))
            continue
        args = b._document(params, f"{name}-args", path)
        before, after = _CALLS[syntax]
        before = before.format(name=name, jname=json_text(name, path))
        calls.append(f"{b.literal(before)} {args} {b.literal(after)}")
    call = b.add_rule("call", " | ".join(calls))
    opening, separator, closing = _FRAMES[syntax]
    body = f"{call} ( {b.literal(separator)} {call} )*" if parallel and syntax != "harmony" else call
    parts = [b.literal(prefix + opening) if prefix + opening else "", body, b.literal(closing) if closing else ""]
    return b.build(" ".join(p for p in parts if p))


def _xml_call(b: GrammarBuilder, name: str, params: dict, path: str) -> str:
    """Qwen3-Coder: one <parameter=KEY> block per argument; a "string"-typed value is the bare
    text (no '<'), any other value is JSON, as the parsers read them."""
    saved, b._root = b._root, params
    b._documents.append(params)
    try:
        s = b._resolve(params["$ref"], path) if isinstance(params, dict) and "$ref" in params else params
        props = s.get("properties", {}) if isinstance(s, dict) else None
        required = s.get("required", []) if isinstance(props, dict) else None
        if (not isinstance(props, dict) or s.get("type", "object") != "object"
                or not isinstance(required, list) or not set(required) <= set(props)):
            raise SchemaError(f"{path}: qwen3_coder needs an object schema with its properties")
        blocks = []
        for key in sorted(props, key=lambda k: k not in required):  # required first, in order
            sub = props[key]
            sub = b._resolve(sub["$ref"], path) if isinstance(sub, dict) and "$ref" in sub else sub
            if isinstance(sub, dict) and sub.get("type") == "string":
                values = sub.get("enum", [sub["const"]] if "const" in sub else None)
                value = (" | ".join(b.literal(str(v)) for v in values) if values
                         else b._string(sub, f"{path}.properties.{key}", raw=True))
            else:
                value = b._visit(props[key], f"{path}.properties.{key}", f"{name}-{key}")
            opening, closing = b.literal(f"<parameter={key}>\n"), b.literal("\n</parameter>\n")
            block = f"{opening} {group(value)} {closing}"
            blocks.append(block if key in required else f"( {block} )?")
        head = b.literal(f"<tool_call>\n<function={name}>\n")
        return " ".join([head, *blocks, b.literal("</function>\n</tool_call>")])
    finally:
        b._root = saved
