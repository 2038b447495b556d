"""Forced tool calls as GBNF: one grammar per model family's tool-call syntax, written as the
family's CallsGrammar says (parsing/tool_families), each call's arguments held to its
function's parameters schema (through GrammarBuilder)."""

from __future__ import annotations

from dataclasses import replace

from ..parsing.call_format import CallFormat
from ..parsing.tool_families import TOOL_SYNTAXES, CallsGrammar, ToolSyntax
from .format_grammars import CallGrammarBuilder, format_call, literal, object_properties
from .gbnf import SchemaError, group, json_text
from .schema import GrammarBuilder

TOOL_CALL_SYNTAXES = tuple(TOOL_SYNTAXES)


def tool_call_grammar(syntax: str | ToolSyntax, tools: list[dict], *, parallel: bool,
                      forced_name: str | None = None, prefix: str = "", loose_markup: bool = False,
                      opened: str = "") -> str:
    """A grammar that forces one (with parallel: one or more) calls of ``tools``, written in
    ``syntax`` (a family's name, or a family derived from a template) after the literal
    ``prefix``. With forced_name only that function. ``harmony`` makes one call even with
    parallel. Tools are OpenAI function definitions, unwrapped. ``loose_markup``: the whitespace in
    the calls' markup may be any the parser reads (a strict call woken part-way, whose own text
    so far the grammar must take: ``<tool_call>{"na`` where Hermes writes a newline). ``opened``:
    the start marker the prompt has already written (functionary v3.2's ``>>>``), which the
    first call then leaves out."""
    if isinstance(syntax, str) and syntax not in TOOL_CALL_SYNTAXES:
        raise ValueError(f"unknown tool-call syntax {syntax!r}")
    if forced_name is not None:
        tools = [t for t in tools if isinstance(t, dict) and t.get("name") == forced_name]
        if not tools:
            raise SchemaError(f"function {forced_name!r} is not among the tools")
    if not tools:
        raise SchemaError("there are no tools to call")
    shape = (TOOL_SYNTAXES[syntax] if isinstance(syntax, str) else syntax).grammar
    b = CallGrammarBuilder(loose_markup)
    calls, firsts = [], []
    first_shape = None
    if (opened and isinstance(shape, CallFormat) and not shape.block_open
            and shape.call_open.startswith(opened)):
        first_shape = replace(shape, call_open=shape.call_open[len(opened):])
    for i, tool in enumerate(tools):
        name = tool.get("name") if isinstance(tool, dict) else None
        if not isinstance(name, str) or not name:
            raise SchemaError(f"tools[{i}]: a function needs a name")
        params, path = tool.get("parameters") or {"type": "object", "properties": {}}, f"tools[{i}].parameters"
        if isinstance(shape, CallFormat):
            calls.append(format_call(b, shape, name, params, path))
            if first_shape is not None:
                firsts.append(format_call(b, first_shape, name, params, path))
            continue
        if shape.parameters:
            args = _parameter_blocks(b, name, params, path)
        else:
            args = b.add_document(params, f"{name}-args", path)
        before, after = shape.before.format(name=name, jname=json_text(name, path)), shape.after
        calls.append(" ".join(p for p in (b.markup(before), args, b.markup(after)) if p))
    call = b.add_rule("call", " | ".join(calls))
    if isinstance(shape, CallFormat):
        first = b.add_rule("first-call", " | ".join(firsts)) if firsts else call
        body = f"{first} ( {literal(b, shape.call_sep)} {call} )*" if parallel and shape.call_sep else first
        if parallel and not shape.call_sep:
            body = f"{first} {call}*"
        framed = [" ".join(p for p in (b.literal(prefix) if prefix else "",
                                       literal(b, shape.block_open) if shape.block_open else "") if p), body,
                  literal(b, shape.block_close) if shape.block_close else ""]
        return b.build(" ".join(p for p in framed if p))
    body = f"{call} ( {b.markup(shape.separator)} {call} )*" if parallel and not shape.one_call else call
    return b.build(" ".join(p for p in _framed(b, shape, prefix, body) if p))


def _framed(b: CallGrammarBuilder, shape: CallsGrammar, prefix: str, body: str) -> list[str]:
    return [b.literal(prefix) if prefix else "", b.markup(shape.opening) if shape.opening else "", body,
            b.markup(shape.closing) if shape.closing else ""]


def _parameter_blocks(b: GrammarBuilder, name: str, params: dict, path: str) -> str:
    """Qwen3-Coder: one <parameter=KEY> block per argument; a "string"-typed value is the bare
    text (no '<'), any other value is JSON, as the parsers read them."""
    with b.document(params):
        props, keys, required = object_properties(b, params, path, "qwen3_coder's calls")
        blocks = []
        for key in keys:                                            # required first, in order
            sub = b.deref(props[key], path)
            if isinstance(sub, dict) and sub.get("type") == "string":
                values = sub.get("enum", [sub["const"]] if "const" in sub else None)
                value = (" | ".join(b.literal(str(v)) for v in values) if values
                         else b.raw_string(sub, f"{path}.properties.{key}"))
            else:
                value = b.add_value(props[key], f"{path}.properties.{key}", f"{name}-{key}")
            opening, closing = b.literal(f"<parameter={key}>\n"), b.literal("\n</parameter>\n")
            block = f"{opening} {group(value)} {closing}"
            blocks.append(block if key in required else f"( {block} )?")
        return " ".join(blocks)
