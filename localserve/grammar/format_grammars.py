"""Forced calls written in a CallFormat (parsing/call_format): a template's own call markup,
the arguments held to each function's parameters schema."""

from __future__ import annotations

import re

from ..parsing.call_format import ID_SLOT, KEY_SLOT, NAME_SLOT, OTHER, STRING, CallFormat, first_word
from .gbnf import SchemaError, group, json_text, repeat
from .schema import GrammarBuilder

_CALL_ID = "[a-zA-Z0-9]{9}"   # the strictest templates' ids (Mistral's nine alphanumerics)


class CallGrammarBuilder(GrammarBuilder):
    """A GrammarBuilder that also writes a call's markup: exactly, or with `loose_markup` each
    whitespace run in it as ``ws`` (none, a space, or a newline and indent), as the call parsers
    read it: a strict call woken part-way, whose own spacing so far must pass
    (``<tool_call>{"na`` where Hermes writes a newline)."""

    def __init__(self, loose_markup: bool = False) -> None:
        super().__init__()
        self.loose_markup = loose_markup

    def markup(self, text: str) -> str:
        if not self.loose_markup:
            return self.literal(text)
        return " ".join("ws" if part.isspace() else self.literal(part)
                        for part in re.split(r"(\s+)", text) if part) or '""'


def literal(b: CallGrammarBuilder, text: str) -> str:
    """A format's literal as GBNF: its text, a call id where the template wrote one."""
    parts = text.split(ID_SLOT)
    items = []
    for i, part in enumerate(parts):
        if part:
            items.append(b.markup(part))
        if i < len(parts) - 1:
            items.append(_CALL_ID)
    return " ".join(items)


def format_call(b: CallGrammarBuilder, fmt: CallFormat, name: str, params: dict, path: str) -> str:
    """One call of `name` as the format writes it, from its call_open to its end."""
    if fmt.layout in ("object", "keyed"):
        head = fmt.object_head.replace(NAME_SLOT, json_text(name, path)[1:-1])
        args = b.add_document(params, f"{name}-args", path)
        return " ".join(p for p in (literal(b, fmt.call_open + head), args,
                                    literal(b, fmt.object_tail + fmt.call_end)) if p)
    if fmt.layout == "json_args":
        args = b.add_document(params, f"{name}-args", path)
        head = fmt.call_open + name + fmt.name_close.replace(NAME_SLOT, name)
        return " ".join(p for p in (literal(b, head), args, literal(b, fmt.call_end)) if p)
    named = CallFormat(**{**fmt.__dict__, "name_close": fmt.name_close.replace(NAME_SLOT, name),
                          "zero_args": fmt.zero_args.replace(NAME_SLOT, name)})
    return f"{literal(b, fmt.call_open + name)} {_pairs(b, named, name, params, path)}"


def object_properties(b: GrammarBuilder, params: dict, path: str, who: str) -> tuple[dict, list[str], list]:
    """An object schema's properties, its keys (the required ones first) and the required ones; a call
    written one argument at a time needs named properties, so any other schema is a SchemaError."""
    s = b.deref(params, path)
    props = s.get("properties", {}) if isinstance(s, dict) else None
    required = s.get("required", []) if isinstance(props, dict) else None
    if (not isinstance(props, dict) or s.get("type", "object") != "object"
            or not isinstance(required, list) or not set(required) <= set(props)):
        raise SchemaError(f"{path}: {who} need an object schema with its properties")
    return props, sorted(props, key=lambda k: k not in required), required


def _pairs(b: CallGrammarBuilder, fmt: CallFormat, name: str, params: dict, path: str) -> str:
    """The key/value pairs: keys in the schema's order, required ones first; after each pair,
    the next pair (a required one, or any optional one before it) or the call's end."""
    with b.document(params):
        props, keys, required = object_properties(b, params, path, "this model's calls")
        kinds, pairs = [], []
        for key in keys:
            kind, value = _value(b, fmt, props[key], key, f"{path}.properties.{key}", name)
            kinds.append(kind)
            pairs.append(f"{b.literal(key)} {literal(b, fmt.key_value[kind].replace(KEY_SLOT, key))} {group(value)}")

        def reachable(after: int) -> list[int]:
            """Pairs that may come next after pair `after` (-1: the first)."""
            found = []
            for j in range(after + 1, len(keys)):
                found.append(j)
                if keys[j] in required:
                    break
            return found

        def ends(after: int) -> bool:
            return all(k not in required for k in keys[after + 1:])

        follow: dict[int, str] = {}
        for i in reversed(range(len(keys))):
            key, kind = keys[i], kinds[i]
            options = [f"{literal(b, fmt.value_next[kind].replace(KEY_SLOT, key))} {pairs[j]} {follow[j]}"
                       for j in reachable(i)]
            if ends(i):
                options.append(literal(b, fmt.value_end[kind].replace(KEY_SLOT, key)))
            follow[i] = b.add_rule(f"{name}-after-{key}", " | ".join(options))
        options = [f"{literal(b, fmt.name_close)} {pairs[j]} {follow[j]}" for j in reachable(-1)]
        if ends(-1):
            options.append(literal(b, fmt.zero_args))
        return group(" | ".join(options))


def _value(b: CallGrammarBuilder, fmt: CallFormat, schema, key: str, path: str, name: str) -> tuple[int, str]:
    """(the value's kind, its rule): a string schema as bare text, anything else as JSON."""
    sub = b.deref(schema, path)
    is_string = isinstance(sub, dict) and sub.get("type") == "string"
    kind = STRING if is_string or not fmt.typed_values else OTHER
    if not is_string:
        return kind, b.add_value(schema, path, f"{name}-{key}")
    values = sub.get("enum", [sub["const"]] if "const" in sub else None)
    if values:
        return kind, " | ".join(b.literal(str(v)) for v in values)
    stop = first_word(fmt.value_stop(kind).replace(KEY_SLOT, key))
    if stop[:1] in ("", "<") or "pattern" in sub or "format" in sub:
        return kind, b.raw_string(sub, path) or '""'
    # a quote-delimited value (Python-style calls) holds its own quote only escaped, as Python
    # writes it (a backslash escapes the next character, not one that starts a numbered escape,
    # which would need its digits; the parser reads the literal as Python does)
    quote = _class_escape(stop[0])
    body = f"[^<{quote}\\x00-\\x1F]"
    if stop[0] in "'\"":
        body = f'[^<{quote}\\\\\\x00-\\x1F] | "\\\\" [^<xuUN\\x00-\\x1F]'
    char = b.add_rule("rawchar-" + "x%X" % ord(stop[0]), body)
    lo, hi = sub.get("minLength", 0), sub.get("maxLength")
    return kind, repeat(char, lo, hi, path) or '""'


def _class_escape(ch: str) -> str:
    return "\\" + ch if ch in "]\\^-" else ch
