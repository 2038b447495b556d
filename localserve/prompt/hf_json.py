"""The exact text Hugging Face's ``tojson`` template filter writes.

HF renders chat templates with ``json.dumps(value, ensure_ascii=False, indent=...,
separators=..., sort_keys=...)``: ", " and ": " separators, one item per line when
an indent is given. Models were trained on that text, so prompts must carry it
byte for byte. orjson writes compact JSON only, so this module lays the text out
itself and lets orjson escape the strings (its escaping is json's with
ensure_ascii=False).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

_NON_ASCII = re.compile(r"[^\x00-\x7e]")    # json escapes DEL too
_SURROGATE = re.compile(r"[\ud800-\udfff]")


def dumps(value: Any, *, ensure_ascii: bool = False, indent: int | str | None = None,
          separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    if isinstance(indent, int):
        indent = " " * indent
    if separators is None:
        separators = (", ", ": ") if indent is None else (",", ": ")
    writer = _Writer(ensure_ascii, indent, separators[0], separators[1], sort_keys)
    writer.value(value, 0)
    return "".join(writer.parts)


class _Writer:
    def __init__(self, ensure_ascii: bool, indent: str | None, item_sep: str, key_sep: str, sort_keys: bool):
        self.ensure_ascii, self.indent = ensure_ascii, indent
        self.item_sep, self.key_sep, self.sort_keys = item_sep, key_sep, sort_keys
        self.parts: list[str] = []
        self._open: set[int] = set()        # containers being written, to refuse a cycle as json does

    def value(self, value: Any, level: int) -> None:
        if isinstance(value, str):
            self.parts.append(self.string(value))
        elif value is None or isinstance(value, (bool, int, float)):
            self.parts.append(scalar(value))
        elif isinstance(value, dict):
            items = sorted(value.items()) if self.sort_keys else value.items()
            self.container(value, "{", "}", [(key_text(k, self), v) for k, v in items], level)
        elif isinstance(value, (list, tuple)):
            self.container(value, "[", "]", [(None, v) for v in value], level)
        else:
            raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    def container(self, obj: Any, opening: str, closing: str, items: list, level: int) -> None:
        if not items:
            self.parts.append(opening + closing)
            return
        if id(obj) in self._open:
            raise ValueError("Circular reference detected")
        self._open.add(id(obj))
        if self.indent is None:
            inner = outer = ""
            separator = self.item_sep
        else:
            inner = "\n" + self.indent * (level + 1)
            outer = "\n" + self.indent * level
            separator = self.item_sep + inner
        self.parts.append(opening + inner)
        for i, (key, item) in enumerate(items):
            if i:
                self.parts.append(separator)
            if key is not None:
                self.parts.append(key + self.key_sep)
            self.value(item, level + 1)
        self.parts.append(outer + closing)
        self._open.discard(id(obj))

    def string(self, text: str) -> str:
        try:
            encoded = orjson.dumps(text).decode()
        except TypeError:           # a lone surrogate is no UTF-8: write it as an escape
            pieces = _SURROGATE.split(text)
            found = _SURROGATE.findall(text)
            body = orjson.dumps(pieces[0]).decode()[1:-1]
            for surrogate, piece in zip(found, pieces[1:]):
                body += f"\\u{ord(surrogate):04x}" + orjson.dumps(piece).decode()[1:-1]
            encoded = f'"{body}"'
        return _ascii_only(encoded) if self.ensure_ascii else encoded


def scalar(value: Any) -> str:
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return int.__repr__(value)          # any size, as json (orjson stops at 64 bits)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    return float.__repr__(value)


def key_text(key: Any, writer: _Writer) -> str:
    if isinstance(key, str):
        return writer.string(key)
    if key is None or isinstance(key, (bool, int, float)):
        return writer.string(scalar(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def _ascii_only(encoded: str) -> str:
    def escape(match: re.Match) -> str:
        code = ord(match.group())
        if code > 0xFFFF:                   # as a UTF-16 surrogate pair, the way json writes it
            code -= 0x10000
            return f"\\u{0xD800 | (code >> 10):04x}\\u{0xDC00 | (code & 0x3FF):04x}"
        return f"\\u{code:04x}"
    return _NON_ASCII.sub(escape, encoded)
