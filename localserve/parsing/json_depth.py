"""How deep JSON nests, checked without recursion: the walks after a reader (the schema builder,
the templates' tojson, the store's writes) recurse, so what they are given nests no deeper than
MAX_JSON_DEPTH. A request body is checked once (dialects/exchange.py); JSON a client sends inside
a string (a tool call's arguments) is read with json_object, which keeps text too deep as text."""

from __future__ import annotations

from typing import Any

import orjson

MAX_JSON_DEPTH = 128               # nesting of a request body (the walks over it recurse; orjson writes 254)


def nests_deeper(text: bytes | bytearray | str, value: Any, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether arrays and objects in `value` (parsed from `text`) nest more than `limit` deep.
    Fewer brackets in the text than the limit can't nest past it (the usual case, no walk);
    otherwise a walk level by level, where an empty container leads no deeper and is dropped:
    about a second for 7.5 million of them (a walk of (node, depth) pairs took twelve)."""
    if text.count("[" if isinstance(text, str) else b"[") + text.count("{" if isinstance(text, str) else b"{") <= limit:
        return False
    level = [value]
    for _ in range(limit - 1):
        level = [child for node in level for child in (node.values() if type(node) is dict else node)
                 if (type(child) is dict or type(child) is list) and child]
        if not level:
            return False
    return any(type(child) is dict or type(child) is list
               for node in level for child in (node.values() if type(node) is dict else node))


def json_object(text: str) -> dict | None:
    """The JSON object `text` holds, or None: not JSON, not an object, or nested deeper than
    MAX_JSON_DEPTH (orjson reads 1,024 levels; the template's tojson recursed past Python's limit:
    a 500 for a tool call's arguments of 1,000 nested objects)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(value, dict) or nests_deeper(text, value):
        return None
    return value
