"""Tool calls written as text in a family's own words, for a template that cannot show calls
(prompt/polyfill): the model then sees in its history the format it writes itself (LFM2's
``<|tool_call_start|>[get_weather(city='Paris')]<|tool_call_end|>``, DeepSeek's
``<｜tool▁call▁begin｜>`` blocks), not another family's.

The text is the family's forced-call shape filled in: a hand-written family's CallsGrammar, or
the literals of a format derived from the template (parsing/call_format). Families with no
words of their own (the generic JSON one) and harmony, whose calls are messages of their own,
get None: the caller writes Hermes markup instead.
"""

from __future__ import annotations

from ..parsing.call_format import ID_SLOT, KEY_SLOT, NAME_SLOT, OTHER, STRING, CallFormat
from ..parsing.json_depth import json_object
from ..parsing.tool_families import CallsGrammar, ToolSyntax
from .jinja_env import tojson

__all__ = ["family_calls_text"]

Call = tuple[str, object, str]                  # (name, arguments, call id)

_PYTHON_VALUES = {True: "True", False: "False", None: "None"}


def family_calls_text(family: ToolSyntax | None, calls: list[Call]) -> str | None:
    """`calls` as `family` writes them, or None where it has no words of its own for them."""
    if family is None or family.name == "json" or not calls:
        return None
    parsed = []
    for name, arguments, call_id in calls:
        if isinstance(arguments, str):
            arguments = json_object(arguments)      # None past MAX_JSON_DEPTH: tojson recurses
        if not isinstance(arguments, dict):
            return None
        parsed.append((name, arguments, call_id))
    shape = family.grammar
    if isinstance(shape, CallFormat):
        return _format_text(shape, parsed)
    return _calls_grammar_text(shape, parsed)


def _calls_grammar_text(shape: CallsGrammar, calls: list[tuple[str, dict, str]]) -> str | None:
    if shape.one_call:
        return None
    written = []
    for name, arguments, _ in calls:
        if shape.parameters:      # qwen3_coder: one block per argument
            body = "".join(f"<parameter={key}>\n{value if isinstance(value, str) else tojson(value)}\n</parameter>\n"
                           for key, value in arguments.items())
        else:
            body = tojson(arguments)
        written.append(shape.before.format(name=name, jname=tojson(name)) + body + shape.after)
    return shape.opening + shape.separator.join(written) + shape.closing


def _format_text(fmt: CallFormat, calls: list[tuple[str, dict, str]]) -> str:
    written = []
    for name, arguments, call_id in calls:
        if fmt.layout in ("object", "keyed"):
            text = fmt.call_open + fmt.object_head.replace(NAME_SLOT, name) + tojson(arguments) + fmt.object_tail
            text += fmt.call_end
        elif fmt.layout == "json_args":
            text = fmt.call_open + name + fmt.name_close.replace(NAME_SLOT, name) + tojson(arguments) + fmt.call_end
        else:
            text = fmt.call_open + name + _pairs_text(fmt, name, arguments)
        written.append(text.replace(ID_SLOT, call_id))
    return fmt.block_open + fmt.call_sep.join(written) + fmt.block_close


def _pairs_text(fmt: CallFormat, name: str, arguments: dict) -> str:
    if not arguments:
        return fmt.zero_args.replace(NAME_SLOT, name)
    text = fmt.name_close.replace(NAME_SLOT, name)
    items = list(arguments.items())
    for i, (key, value) in enumerate(items):
        kind = STRING if isinstance(value, str) or not fmt.typed_values else OTHER
        follow = fmt.value_next[kind] if i < len(items) - 1 else fmt.value_end[kind]
        text += key + fmt.key_value[kind].replace(KEY_SLOT, key) + _value_text(fmt, kind, value)
        text += follow.replace(KEY_SLOT, key)
    return text


def _value_text(fmt: CallFormat, kind: int, value: object) -> str:
    """A value as the format writes it: a string as itself (a quoted Python string escaped as
    Python escapes it), any other value as JSON (Python's True/False/None in a Python call)."""
    quote = fmt.key_value[STRING][-1:]
    python = quote in ("'", '"')
    if isinstance(value, str):
        if kind == STRING and python:
            return value.replace("\\", "\\\\").replace(quote, "\\" + quote).replace("\n", "\\n")
        return value if kind == STRING else tojson(value)
    if python and (value is None or isinstance(value, bool)):
        return _PYTHON_VALUES[value]
    return tojson(value)
