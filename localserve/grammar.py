"""GBNF grammars for llama.cpp's grammar sampler: JSON Schema → grammar, and forced tool calls.

Whatever a grammar from here lets a model write parses with a strict ``json.loads`` (strings hold
JSON escapes, never raw control characters) and validates against the schema it was built from.
Where that cannot be guaranteed the schema is refused with SchemaError instead.

Choices worth knowing:
- Whitespace between JSON tokens is ``ws``: nothing, one space, or a newline and at most
  WS_MAX_INDENT spaces or tabs (llama.cpp's own json.gbnf caps it the same way), so a model
  can never stall by writing whitespace forever. Nothing surrounds the top-level value.
- An object schema with ``properties`` (even empty) but no ``additionalProperties`` allows no
  other keys, as in OpenAI strict mode; ``{"type": "object"}`` without them is any object.
  Declared keys come in schema order, required ones first; optional ones may be left out.
- Numbers have at most 15 integer digits, 15 fraction digits and a 2-digit exponent. Bounds
  are exact for integers; for numbers they are rounded inward to integers (and exponents are
  dropped), which loses some valid values but never admits an invalid one.
- ``oneOf`` is taken as ``anyOf``: its branches should not overlap. ``format`` date, time,
  date-time and uuid write a safe subset (days 01-28, years 1000-9999); other formats are
  plain strings. ``pattern`` supports a regex subset (classes, groups, alternation,
  quantifiers, ``^``/``$`` at the ends); anything else raises SchemaError.
- Character classes are positive ranges of Unicode scalar values: llama.cpp lets a negated
  class match bytes that decode to no character. It still lets overlong UTF-8 through (E0
  80-9F .., F0 80-8F ..); the engine's errors="replace" decoding keeps such JSON parseable.
- Rule names use only [a-zA-Z0-9-]: llama.cpp's GBNF parser allows no underscore.
"""

from __future__ import annotations

import json
import math
import re
from urllib.parse import unquote

WS_MAX_INDENT = 20
MAX_INT_DIGITS = 15
MAX_REPEAT = 2000  # llama.cpp's MAX_REPETITION_THRESHOLD: larger {m,n} counts are refused or dropped


class SchemaError(ValueError):
    """A JSON schema that is invalid, or that no grammar here can enforce exactly."""


_PRIMITIVES = {
    "ws": f'| " " | "\\n" [ \\t]{{0,{WS_MAX_INDENT}}}',
    "keychar": r"[\x20-\x21\x23-\x5B\x5D-\uD7FF\uE000-\U0010FFFF]",  # no '"', '\' or controls
    "char": r'keychar | "\\" ( ["\\/bfnrt] | "u" ( [0-9a-cA-Ce-fE-F] [0-9a-fA-F]{3} | [dD] [0-7] [0-9a-fA-F]{2} ) )',
    "rawchar": r"[\x01-\x3B\x3D-\uD7FF\uE000-\U0010FFFF]",  # anything but '<'
    "string": r'"\"" char* "\""',
    "integer": r'"-"? ( "0" | [1-9] [0-9]{0,14} )',
    "number": r'"-"? ( "0" | [1-9] [0-9]{0,14} ) ( "." [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} )?',
    "boolean": '"true" | "false"',
    "null": '"null"',
    "value": "object | array | string | number | boolean | null",
    "object": r'"{" ws ( member ( ws "," ws member )* ws )? "}"',
    "member": r'string ws ":" ws value',
    "array": r'"[" ws ( value ( ws "," ws value )* ws )? "]"',
}
_SCALARS = [(0x01, 0xD7FF), (0xE000, 0x10FFFF)]  # what a grammar may write: no NUL, no surrogates
_KEY_CHARS = [(0x20, 0x21), (0x23, 0x5B), (0x5D, 0xD7FF), (0xE000, 0x10FFFF)]  # keychar's ranges
_DATE = r'[1-9] [0-9]{3} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | "1" [0-9] | "2" [0-8] )'
_TIME = (r'( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? '
         r'( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] )')
_FORMATS = {"date": _DATE, "time": _TIME, "date-time": f'{_DATE} "T" {_TIME}',
            "uuid": '[0-9a-f]{8} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{4} "-" [0-9a-f]{12}'}
_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
_INFER = (  # keywords that imply a type when "type" is absent
    ("object", ("properties", "additionalProperties", "required", "minProperties", "maxProperties")),
    ("array", ("items", "prefixItems", "minItems", "maxItems")),
    ("string", ("minLength", "maxLength", "pattern", "format")),
    ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")))
_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$anchor", "strict",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "contentEncoding", "contentMediaType"})
_UNSUPPORTED = frozenset({
    "not", "if", "then", "else", "contains", "minContains", "maxContains", "dependentSchemas",
    "dependentRequired", "dependencies", "propertyNames", "unevaluatedItems",
    "unevaluatedProperties", "$dynamicRef", "$recursiveRef"})
_OBJECT_KEYS = ("properties", "additionalProperties", "required")
_LITERAL_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_NAME = re.compile(r"[A-Za-z0-9-]+")
_QUOTED_OR_CLASS = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]')
_IS_TYPE = {
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None}


def _canon(value) -> str:
    return json.dumps(value, sort_keys=True, default=repr)


def _json_text(value, path: str) -> str:
    """Compact JSON text for a value, as UTF-8-safe text."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"{path}: {value!r} is not a JSON value") from exc
    return text


def _group(expr: str) -> str:
    return f"( {expr} )" if "|" in expr else expr


def _repeat(item: str, lo: int, hi: int | None, path: str) -> str:
    if max(lo, hi or 0) > MAX_REPEAT:
        raise SchemaError(f"{path}: repetition counts above {MAX_REPEAT} are not supported")
    if hi == 0:
        return ""
    return f"{item}*" if (lo, hi) == (0, None) else f"{item}{{{lo},{'' if hi is None else hi}}}"


def _count(s: dict, key: str, default, path: str):
    value = s.get(key, default)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise SchemaError(f"{path}.{key}: must be a non-negative integer")
    return value


def _subtract(ranges, holes) -> list[tuple[int, int]]:
    """Code point ranges less the holes (both lists of inclusive (first, last) pairs)."""
    out = []
    for a, b in ranges:
        for lo, hi in sorted(holes):
            if lo <= b and hi >= a:
                if lo > a:
                    out.append((a, lo - 1))
                a = hi + 1
        if a <= b:
            out.append((a, b))
    return out


def _class(ranges) -> str:
    def char(cp: int) -> str:
        if chr(cp).isascii() and chr(cp).isalnum():
            return chr(cp)
        return f"\\u{cp:04X}" if cp <= 0xFFFF else f"\\U{cp:08X}"
    return "[" + "".join(char(a) + (f"-{char(b)}" if b > a else "") for a, b in ranges) + "]"


# -- integer ranges as digit strings ------------------------------------------------------------

def _same_length(a: str, b: str) -> str:
    """Decimal strings of as many digits as a and b, between a and b (inclusive)."""
    if a == b:
        return f'"{a}"'
    if a[0] == b[0]:
        return f'"{a[0]}" ' + _group(_same_length(a[1:], b[1:]))
    rest = len(a) - 1
    zeros, nines, tail = "0" * rest, "9" * rest, f" [0-9]{{{rest}}}" if rest else ""
    if a[1:] == zeros and b[1:] == nines:
        return f"[{a[0]}-{b[0]}]{tail}"
    alts, first, last = [], int(a[0]), int(b[0])
    if a[1:] != zeros:
        alts.append(f'"{a[0]}" ' + _group(_same_length(a[1:], nines)))
        first += 1
    if b[1:] != nines:
        last -= 1
    if first <= last:
        alts.append((f'"{first}"' if first == last else f"[{first}-{last}]") + tail)
    if b[1:] != nines:
        alts.append(f'"{b[0]}" ' + _group(_same_length(zeros, b[1:])))
    return " | ".join(alts)


def _uint_range(lo: int, hi: int | None) -> str:
    """Decimal naturals in [lo, hi] without leading zeros; hi None: up to MAX_INT_DIGITS digits."""
    hi = max(lo, 10 ** MAX_INT_DIGITS - 1) if hi is None else hi
    alts, full = [], []
    for n in range(len(str(lo)), len(str(hi)) + 1):
        a, b = max(lo, 10 ** (n - 1) if n > 1 else 0), min(hi, 10 ** n - 1)
        if n > 1 and a == 10 ** (n - 1) and b == 10 ** n - 1:
            full.append(n - 1)  # every n-digit number: merged into one alternative below
        else:
            alts.append(_same_length(str(a), str(b)))
    if full:
        alts.append(f"[1-9] [0-9]{{{full[0]},{full[-1]}}}")
    return " | ".join(alts)


def _signed_range(lo: int | None, hi: int | None, fraction: bool) -> str:
    """Integers (or, with fraction, decimals without exponent) in [lo, hi]; None = unbounded."""
    frac = ' ( "." [0-9]{1,15} )?' if fraction else ""
    alts = []

    def part(sign: str, a: int, b: int | None) -> None:  # magnitudes in [a, b]
        if not fraction or b is None:
            alts.append(sign + _group(_uint_range(a, b)) + frac)
            return
        if a <= b - 1:  # n.fff with a <= n < b stays below b
            alts.append(sign + _group(_uint_range(a, b - 1)) + frac)
        alts.append(f'{sign}"{b}" ( "." "0"{{1,15}} )?')

    if hi is None or hi >= 0:
        part("", max(lo, 0) if lo is not None else 0, hi)
    if lo is None or lo < 0:
        nearest = -hi if hi is not None and hi < 0 else (0 if fraction else 1)
        part('"-" ', nearest, None if lo is None else -lo)
    return " | ".join(alts)


def _bounds(s: dict, path: str) -> tuple[int | None, int | None]:
    """minimum/maximum and their exclusive forms, rounded inward to integers."""
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        v = s.get(key)
        if v is not None and not isinstance(v, bool) and (
                not isinstance(v, (int, float)) or not math.isfinite(v)):
            raise SchemaError(f"{path}.{key}: must be a finite number")
    low, high = s.get("minimum"), s.get("maximum")
    xlow, xhigh = s.get("exclusiveMinimum"), s.get("exclusiveMaximum")
    if isinstance(xlow, bool):  # draft 4: a flag on minimum
        xlow, low = (low if xlow else None), (None if xlow else low)
    if isinstance(xhigh, bool):
        xhigh, high = (high if xhigh else None), (None if xhigh else high)
    lows = [f(x) for f, x in ((math.ceil, low), (lambda x: math.floor(x) + 1, xlow)) if x is not None]
    highs = [f(x) for f, x in ((math.floor, high), (lambda x: math.ceil(x) - 1, xhigh)) if x is not None]
    return (max(lows) if lows else None), (min(highs) if highs else None)


# -- the builder --------------------------------------------------------------------------------

class GrammarBuilder:
    """Accumulates named GBNF rules; shared primitives (ws, string, number, …) added once."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}
        self._memo: dict[tuple[int, str], str] = {}  # (document, schema) -> rule
        self._refs: dict[tuple[int, str], str] = {}  # (document, $ref) -> rule
        self._documents: list = []  # keeps documents alive, so that their ids stay unique
        self._root: dict = {}
        self._bare_refs: set[tuple[int, str]] = set()  # refs entered with no "{" or "[" since

    def literal(self, text: str) -> str:
        """A GBNF literal matching exactly ``text`` (non-ASCII is written as UTF-8)."""
        if "\x00" in text:
            raise ValueError("llama.cpp grammars cannot match U+0000")
        text.encode("utf-8")  # lone surrogates cannot be matched either: raise now
        return '"' + "".join(_LITERAL_ESCAPES.get(c) or (
            f"\\x{ord(c):02X}" if ord(c) < 0x20 else c) for c in text) + '"'

    def add_rule(self, name: str, body: str) -> str:
        """Add ``name ::= body``; returns the name used, made unique if already taken."""
        base = "-".join(_NAME.findall(name.replace("_", "-"))) or "rule"
        if body and self._rules.get(base) == body:
            return base
        candidate, n = base, 1
        while candidate in self._rules or candidate in _PRIMITIVES or candidate == "root":
            n += 1
            candidate = f"{base}-{n}"
        self._rules[candidate] = body
        return candidate

    def add_schema(self, schema: dict, name_hint: str = "value") -> str:
        """Add rules for a JSON schema; returns a rule name matching JSON valid for it."""
        return self._document(schema, name_hint, "schema")

    def build(self, root_body: str) -> str:
        """The full grammar text, ``root ::= root_body`` first, then every rule used."""
        rules = dict(self._rules)
        pending = [root_body, *rules.values()]
        while pending:
            for word in _NAME.findall(_QUOTED_OR_CLASS.sub(" ", pending.pop())):
                if word in _PRIMITIVES and word not in rules:
                    rules[word] = _PRIMITIVES[word]
                    pending.append(rules[word])
        return "".join(f"{n} ::= {b}\n" for n, b in {"root": root_body, **rules}.items())

    # -- schema walk --

    def _document(self, schema, hint: str, path: str) -> str:
        if not isinstance(schema, dict):
            raise SchemaError(f"{path}: a schema must be a JSON object, not {type(schema).__name__}")
        saved, self._root = self._root, schema
        self._documents.append(schema)
        try:
            return self._visit(schema, path, hint)
        finally:
            self._root = saved

    def _visit(self, s, path: str, hint: str) -> str:
        """A rule name for schema ``s`` (shared between identical schemas)."""
        s = {} if s is True else s
        if not isinstance(s, dict):
            raise SchemaError(f"{path}: a schema must be a JSON object or true, not {s!r}")
        key = (id(self._root), _canon(s))
        if key not in self._memo:
            body = self._body(s, path, hint)
            self._memo[key] = body if _NAME.fullmatch(body) else self.add_rule(hint, body)
        return self._memo[key]

    def _ref(self, ref, path: str) -> str:
        key = (id(self._root), ref)
        if key in self._bare_refs:
            raise SchemaError(f"{path}: $ref {ref!r} refers back to itself without nesting")
        if key not in self._refs:
            target = self._resolve(ref, path)
            name = self._refs[key] = self.add_rule(ref.rsplit("/", 1)[-1].strip("#") or "root-ref", "")
            self._bare_refs.add(key)
            try:
                self._rules[name] = self._body(target, ref, name)
            finally:
                self._bare_refs.discard(key)
        return self._refs[key]

    def _resolve(self, ref, path: str):
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaError(f"{path}: unsupported $ref {ref!r} (only '#/...' within the schema)")
        node = self._root
        for part in ref[1:].split("/")[1:]:
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise SchemaError(f"{path}: $ref {ref!r} points to nothing")
        return node

    def _body(self, s, path: str, hint: str) -> str:
        if s is True or s == {}:
            return "value"
        if not isinstance(s, dict):
            raise SchemaError(f"{path}: a schema must be a JSON object, not {s!r}")
        rest = {k: v for k, v in s.items() if k not in _ANNOTATIONS}
        if "$ref" in rest:
            ref = rest.pop("$ref")
            if not rest:
                return self._ref(ref, path)
            return self._body(self._merge([{"$ref": ref}, rest], path), path, hint)
        unsupported = sorted(_UNSUPPORTED & s.keys())
        if unsupported:
            raise SchemaError(f"{path}: keyword {unsupported[0]!r} is not supported")
        if "allOf" in rest:
            subs = rest.pop("allOf")
            if not isinstance(subs, list) or not subs:
                raise SchemaError(f"{path}.allOf: must be a non-empty list of schemas")
            return self._body(self._merge([rest, *subs], f"{path}.allOf"), path, hint)
        if "anyOf" in rest or "oneOf" in rest:
            return self._any_of(rest, path, hint)
        if "const" in rest or "enum" in rest:
            return self._enum(rest, path)
        types = self._types(s, path)
        if types is None:
            return "value"
        alts = [self._typed(t, s, path, hint) for t in types]
        if s.get("nullable") is True and "null" not in types:  # OpenAPI
            alts.append("null")
        return " | ".join(alts)

    def _types(self, s: dict, path: str) -> list[str] | None:
        t = s.get("type")
        if t is None:
            return [name for name, keys in _INFER if any(k in s for k in keys)] or None
        types = [t] if isinstance(t, str) else t
        if not isinstance(types, list) or not types:
            raise SchemaError(f"{path}.type: must be a type name or a non-empty list of them")
        for one in types:
            if one not in _TYPES:
                raise SchemaError(f"{path}: unknown type {one!r}")
        return list(dict.fromkeys(x for x in types if x != "integer" or "number" not in types))

    def _typed(self, t: str, s: dict, path: str, hint: str) -> str:
        if t == "string":
            return self._string(s, path)
        if t in ("integer", "number"):
            return self._numeric(s, path, t == "integer")
        if t == "object":
            return self._object(s, path, hint)
        if t == "array":
            return self._array(s, path, hint)
        return t  # boolean, null: primitives

    def _any_of(self, s: dict, path: str, hint: str) -> str:
        key = "anyOf" if "anyOf" in s else "oneOf"
        branches = s.pop(key)
        if not isinstance(branches, list) or not branches:
            raise SchemaError(f"{path}.{key}: must be a non-empty list of schemas")
        if "anyOf" in s or "oneOf" in s:
            raise SchemaError(f"{path}: anyOf together with oneOf is not supported")
        alts = []
        for i, branch in enumerate(branches):  # sibling keywords apply to every branch
            sub = self._merge([s, branch], f"{path}.{key}[{i}]") if s else branch
            alts.append(self._visit(sub, f"{path}.{key}[{i}]", f"{hint}-{i}"))
        return " | ".join(dict.fromkeys(alts))

    def _enum(self, s: dict, path: str) -> str:
        values = s["enum"] if "enum" in s else [s["const"]]
        if not isinstance(values, list) or not values:
            raise SchemaError(f"{path}.enum: must be a non-empty list")
        if "const" in s:
            values = [v for v in values if _canon(v) == _canon(s["const"])]
        types = self._types({"type": s["type"]}, path) if "type" in s else None
        kept = [v for v in values if types is None or any(_IS_TYPE[t](v) for t in types)]
        if not kept:
            raise SchemaError(f"{path}: no enum/const value satisfies the schema's type")
        return " | ".join(dict.fromkeys(self.literal(_json_text(v, path)) for v in kept))

    def _string(self, s: dict, path: str, raw: bool = False) -> str:
        """A JSON string; with raw, the bare text (no quotes, no escapes, no '<')."""
        lo, hi = _count(s, "minLength", 0, path), _count(s, "maxLength", None, path)
        if hi is not None and lo > hi:
            raise SchemaError(f"{path}: minLength is above maxLength")
        if "pattern" in s:
            if not isinstance(s["pattern"], str):
                raise SchemaError(f"{path}.pattern: must be a string")
            if lo or hi is not None:
                raise SchemaError(f"{path}: pattern together with minLength/maxLength is not supported")
            inner = _Regex(self, s["pattern"], raw, f"{path}.pattern").translate()
        elif s.get("format") in _FORMATS and not lo and hi is None:
            inner = _FORMATS[s["format"]]
        else:
            inner = _repeat("rawchar" if raw else "char", lo, hi, path) or '""'
        return inner if raw else f'"\\"" {inner} "\\""'

    def _numeric(self, s: dict, path: str, integer: bool) -> str:
        if s.get("multipleOf") is not None and not (integer and s["multipleOf"] == 1):
            raise SchemaError(f"{path}: keyword 'multipleOf' is not supported")
        lo, hi = _bounds(s, path)
        if lo is None and hi is None:
            return "integer" if integer else "number"
        if lo is not None and hi is not None and lo > hi:
            raise SchemaError(f"{path}: no {'integer' if integer else 'number'} this grammar can "
                              "write lies within minimum/maximum")
        return _signed_range(lo, hi, fraction=not integer)

    def _object(self, s: dict, path: str, hint: str) -> str:
        props, required = s.get("properties", {}), s.get("required", [])
        if not isinstance(props, dict):
            raise SchemaError(f"{path}.properties: must be an object")
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise SchemaError(f"{path}.required: must be a list of property names")
        extra = s.get("additionalProperties", "properties" not in s)
        if not isinstance(extra, (bool, dict)):
            raise SchemaError(f"{path}.additionalProperties: must be a boolean or a schema")
        if extra is not False and "patternProperties" in s:
            raise SchemaError(f"{path}: patternProperties with additional properties is not supported")
        for r in required:
            if extra is False and r not in props:
                raise SchemaError(f"{path}: required property {r!r} is not allowed")
        names = list(dict.fromkeys([*props, *required]))
        least, most = _count(s, "minProperties", 0, path), _count(s, "maxProperties", None, path)
        if least > len(set(required)) or (most is not None and (extra is not False or most < len(names))):
            raise SchemaError(f"{path}: minProperties/maxProperties are not supported here")
        order = [k for k in names if k in required] + [k for k in names if k not in required]
        saved, self._bare_refs = self._bare_refs, set()  # "{" is written before any member
        try:
            members = {}
            for k in order:
                value = self._visit(props.get(k, extra if isinstance(extra, dict) else {}),
                                    f"{path}.properties.{k}", f"{hint}-{k}")
                key = self.literal(_json_text(k, path))
                members[k] = self.add_rule(f"{hint}-{k}-kv", f'{key} ws ":" ws {value}')
            extra_kv = None
            if extra is not False:
                value = self._visit(extra, f"{path}.additionalProperties", f"{hint}-extra")
                extra_kv = self.add_rule(f"{hint}-extra-kv", f'{self._key_not_in(names)} ws ":" ws {value}')
        finally:
            self._bare_refs = saved
        return self._members(hint, [members[k] for k in order if k in required],
                             [members[k] for k in order if k not in required], extra_kv)

    def _members(self, hint: str, req: list[str], opt: list[str], extra: str | None) -> str:
        tail = f' ( ws "," ws {extra} )*' if extra else ""
        if req:
            body = ' ws "," ws '.join(req) + "".join(f' ( ws "," ws {o} )?' for o in opt)
            return f'"{{" ws {body}{tail} ws "}}"'
        if not opt and not extra:
            return '"{" ws "}"'
        alts, rest = [], tail  # rest: what may follow opt[i], each member led by its comma
        for i in reversed(range(len(opt))):
            alts.insert(0, f"{opt[i]}{rest}")
            if i:
                rest = " " + self.add_rule(f"{hint}-rest", f'( ws "," ws {opt[i]} )?{rest}')
        if extra:
            alts.append(f"{extra}{tail}")
        return f'"{{" ws ( ( {" | ".join(alts)} ) ws )? "}}"'

    def _key_not_in(self, names: list[str]) -> str:
        """A key that is none of ``names``: unescaped characters only, so it reads as written."""
        trie: dict = {}
        for name in names:
            if not any(c in '"\\' or ord(c) < 0x20 for c in name):  # no plain key can equal it
                node = trie
                for c in name:
                    node = node.setdefault(c, {})
                node[""] = {}
        if not trie:
            return "string"

        def walk(node: dict) -> str:
            chars = sorted(c for c in node if c)
            others = _subtract(_KEY_CHARS, [(ord(c), ord(c)) for c in chars])
            alts = [f'{_class(others)} keychar* "\\""'] + [f"{self.literal(c)} {walk(node[c])}" for c in chars]
            return "( " + " | ".join(alts + ['"\\""'] * ("" not in node)) + " )"

        return self.add_rule("key", '"\\"" ' + walk(trie))

    def _array(self, s: dict, path: str, hint: str) -> str:
        prefix, items = s.get("prefixItems", []), s.get("items", True)
        if isinstance(items, list):  # draft 4 tuples
            prefix, items = items, s.get("additionalItems", True)
        if not isinstance(prefix, list):
            raise SchemaError(f"{path}.prefixItems: must be a list of schemas")
        lo, hi = _count(s, "minItems", 0, path), _count(s, "maxItems", None, path)
        if items is False:
            hi = len(prefix) if hi is None else min(hi, len(prefix))
        if hi is not None and lo > hi:
            raise SchemaError(f"{path}: minItems is above maxItems (or the items allowed)")
        if s.get("uniqueItems") is True and (hi is None or hi > 1):
            raise SchemaError(f"{path}: keyword 'uniqueItems' is not supported")
        saved, self._bare_refs = self._bare_refs, set()  # "[" is written before any item
        try:
            elems = [self._visit(p, f"{path}.prefixItems[{i}]", f"{hint}-{i}") for i, p in enumerate(prefix[:hi])]
            if items is not False and (hi is None or hi > len(elems)):
                item = self._visit(items, f"{path}.items", f"{hint}-item")
                more = self.add_rule(f"{hint}-more", f'ws "," ws {item}')
                if elems:  # the items after the prefix, each led by its comma
                    n = len(elems)
                    elems[-1] += " " + _repeat(more, max(lo - n, 0), None if hi is None else hi - n, path)
                else:
                    elems = [f"{item} {_repeat(more, max(lo - 1, 0), None if hi is None else hi - 1, path)}"]
        finally:
            self._bare_refs = saved
        if not elems:
            return '"[" ws "]"'
        seq = elems[-1].strip()
        for i in reversed(range(1, len(elems))):  # element i may be left out from minItems on
            seq = f'{elems[i - 1]} ( ws "," ws {seq} )' + ("" if i < lo else "?")
        return f'"[" ws {seq} ws "]"' if lo else f'"[" ws ( {seq} ws )? "]"'

    def _merge(self, schemas: list, path: str, depth: int = 0) -> dict:
        """One schema equivalent to allOf(schemas), for the simple cases; else SchemaError."""
        if depth > 16:
            raise SchemaError(f"{path}: allOf/$ref nesting too deep to merge")
        schemas = [sub for sub in schemas if sub is not True and sub != {}]
        if len(schemas) == 1 and isinstance(schemas[0], dict) and "allOf" not in schemas[0]:
            return schemas[0]  # nothing to merge: a $ref in it stays a reference
        flat = []
        for sub in schemas:
            if not isinstance(sub, dict):
                raise SchemaError(f"{path}: a schema must be a JSON object, not {sub!r}")
            sub = {k: v for k, v in sub.items() if k not in _ANNOTATIONS}
            if "$ref" in sub:
                sub = self._merge([self._resolve(sub.pop("$ref"), path), sub], path, depth + 1)
            if "allOf" in sub:
                sub = self._merge([*sub.pop("allOf"), sub], path, depth + 1)
            flat.append(sub)
        out: dict = {}
        for k, v in ((k, v) for sub in flat for k, v in sub.items() if k not in _OBJECT_KEYS):
            if k not in out or _canon(out[k]) == _canon(v):
                out[k] = v
            elif k == "type":
                a, b = ({x} if isinstance(x, str) else set(x) for x in (out[k], v))
                a, b = (x | {"integer"} if "number" in x else x for x in (a, b))
                out[k] = sorted(a & b) or self._fail(f"{path}: allOf branches allow no common type")
            elif k in ("minimum", "exclusiveMinimum", "minLength", "minItems"):
                out[k] = max(out[k], v)
            elif k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems"):
                out[k] = min(out[k], v)
            else:
                raise SchemaError(f"{path}: cannot merge differing {k!r} in allOf")
        objects = [sub for sub in flat if any(k in sub for k in _OBJECT_KEYS)]
        return out | (self._merge_objects(objects, path, depth) if objects else {})

    def _merge_objects(self, subs: list[dict], path: str, depth: int) -> dict:
        def allowed(sub, k):  # the schema sub gives key k: absent additionalProperties allow any
            props = sub.get("properties", {})
            return props[k] if k in props else sub.get("additionalProperties", True)

        names = dict.fromkeys(k for sub in subs for k in sub.get("properties", {}))
        parts = {k: [allowed(sub, k) for sub in subs] for k in names}
        extras = [sub.get("additionalProperties", True) for sub in subs]
        out = {"properties": {k: self._merge(p, f"{path}.properties.{k}", depth + 1)
                              for k, p in parts.items() if False not in p},
               "required": list(dict.fromkeys(r for sub in subs for r in sub.get("required", [])))}
        if False in extras:
            out["additionalProperties"] = False
        elif any(isinstance(e, dict) for e in extras):
            out["additionalProperties"] = self._merge(extras, f"{path}.additionalProperties", depth + 1)
        return out

    @staticmethod
    def _fail(message: str):
        raise SchemaError(message)


class _Regex:
    """A regex subset → GBNF over the characters as written in a JSON string (or, raw, as bare
    text without '<'). Full-string match; an end without ^ or $ is open (``char*``)."""

    _CLASSES = {"d": [(48, 57)], "w": [(48, 57), (65, 90), (95, 95), (97, 122)],
                "s": [(9, 13), (32, 32), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A), (0x2028, 0x2029),
                      (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF)]}  # as ECMA-262
    _ESCAPES = {"n": 10, "t": 9, "r": 13, "f": 12, "v": 11, "0": 0}

    def __init__(self, builder: GrammarBuilder, pattern: str, raw: bool, path: str) -> None:
        self.b, self.p, self.raw, self.path, self.i, self.end = builder, pattern, raw, path, 0, False
        self.specials = [0x3C] if raw else [0x22, 0x5C, *range(0x20)]  # written otherwise or never

    def fail(self, what: str):
        raise SchemaError(f"{self.path}: {what} in {self.p!r} is not supported")

    def peek(self, n: int = 1) -> str:
        return self.p[self.i:self.i + n]

    def translate(self) -> str:
        start = self.p.startswith("^")
        self.i = int(start)
        branches = self.alternatives(0)
        if self.i != len(self.p):
            self.fail("an unbalanced ')'")
        if len(branches) > 1 and (start or self.end):
            self.fail("'^' or '$' with top-level alternation")
        anything = "rawchar*" if self.raw else "char*"
        return f"{'' if start else anything} ( {' | '.join(branches)} ) {'' if self.end else anything}"

    def alternatives(self, depth: int) -> list[str]:
        branches = [self.sequence(depth)]
        while self.peek() == "|":
            self.i += 1
            branches.append(self.sequence(depth))
        return branches

    def sequence(self, depth: int) -> str:
        items = []
        while self.peek() not in ("", "|", ")"):
            if self.peek() == "$" and depth == 0 and self.i == len(self.p) - 1:
                self.i, self.end = self.i + 1, True
            elif self.peek() in ("^", "$"):
                self.fail(f"{self.peek()!r} inside the pattern")
            else:
                items.append(self.quantified(self.atom(depth)))
        return " ".join(items)

    def atom(self, depth: int) -> str:
        c = self.p[self.i]
        self.i += 1
        if c == "(":
            if self.peek(2) == "?:":
                self.i += 2
            elif self.peek() == "?":
                self.fail("a lookaround, named group or inline flag")
            inner = self.alternatives(depth + 1)
            if self.peek() != ")":
                self.fail("an unbalanced '('")
            self.i += 1
            return f"( {' | '.join(inner)} )"
        if c == "[":
            return self.char_class()
        if c == ".":
            return self.encode(True, [(10, 10), (13, 13), (0x2028, 0x2029)])
        if c == "\\":
            return self.encode(*self.escape())
        if c in "*+?{)":
            self.fail(f"{c!r} with nothing to repeat")
        return self.encode(False, [(ord(c), ord(c))])

    def escape(self) -> tuple[bool, list[tuple[int, int]]]:
        c = self.peek()
        self.i += 1
        if c.lower() in self._CLASSES:
            return c.isupper(), self._CLASSES[c.lower()]
        if c in self._ESCAPES:
            return False, [(self._ESCAPES[c], self._ESCAPES[c])]
        digits = self.peek(2 if c == "x" else 4)
        if c in ("x", "u") and re.fullmatch("[0-9a-fA-F]{2,4}", digits) and len(digits) == (2 if c == "x" else 4):
            self.i += len(digits)
            return False, [(int(digits, 16), int(digits, 16))]
        if not c or c.isalnum():
            self.fail(f"the escape \\{c}")
        return False, [(ord(c), ord(c))]

    def char_class(self) -> str:
        negated = self.peek() == "^"
        self.i += negated
        ranges: list[tuple[int, int]] = []
        while self.peek() != "]":
            lo = self.class_atom()
            if len(lo) == 1 and self.peek() == "-" and self.peek(2) != "-]" and len(self.peek(2)) == 2:
                self.i += 1
                hi = self.class_atom()
                if len(hi) != 1 or hi[0][0] < lo[0][0]:
                    self.fail("a bad class range")
                lo = [(lo[0][0], hi[0][0])]
            ranges += lo
        self.i += 1
        return self.encode(negated, ranges)

    def class_atom(self) -> list[tuple[int, int]]:
        c = self.peek()
        self.i += 1
        if not c:
            self.fail("an unterminated '['")
        if c != "\\":
            return [(ord(c), ord(c))]
        negated, ranges = self.escape()
        if negated:
            self.fail("\\D, \\W or \\S inside a class")
        return ranges

    def quantified(self, atom: str) -> str:
        m = re.match(r"[*+?]|\{(\d+)(,(\d*))?\}", self.p[self.i:])
        if not m:
            return atom
        self.i += m.end()
        if m[1] is None:
            quant = m[0]
        else:
            lo = int(m[1])
            hi = lo if m[2] is None else (int(m[3]) if m[3] else None)
            if hi is not None and lo > hi:
                self.fail("a {m,n} with m > n")
            quant = _repeat("", lo, hi, self.path)
            if hi == 0:
                return ""
        if self.peek() == "+":
            self.fail("a possessive quantifier")
        self.i += self.peek() == "?"  # lazy: the same language
        return (atom if _NAME.fullmatch(atom) else self.b.add_rule("pattern", atom)) + quant

    def encode(self, negated: bool, ranges: list[tuple[int, int]]) -> str:
        """GBNF for the characters of a set, as they are written in the string."""
        chosen = _subtract(_SCALARS, ranges) if negated else _subtract(ranges, [(0, 0), (0xD800, 0xDFFF)])
        plain = _subtract(chosen, [(cp, cp) for cp in self.specials])
        parts = [_class(plain)] if plain else []
        if not self.raw:  # '"', '\' and controls appear as their JSON escapes
            parts += [self.b.literal(json.dumps(chr(cp))[1:-1]) for cp in self.specials
                      if any(a <= cp <= b for a, b in chosen)]
        if not parts:
            self.fail("a character set that is empty here")
        return parts[0] if len(parts) == 1 else f"( {' | '.join(parts)} )"


# -- public entry points ------------------------------------------------------------------------

def json_schema_grammar(schema: dict) -> str:
    """A grammar whose root is a JSON value valid for ``schema``."""
    builder = GrammarBuilder()
    return builder.build(builder.add_schema(schema, "schema"))


def json_object_grammar() -> str:
    """A grammar for any JSON object (response_format json_object)."""
    return GrammarBuilder().build("object")


def validate_schema(schema) -> None:
    """Raise SchemaError if ``schema`` is invalid or cannot be enforced by a grammar."""
    json_schema_grammar(schema)


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
        before = before.format(name=name, jname=_json_text(name, path))
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
            block = f"{opening} {_group(value)} {closing}"
            blocks.append(block if key in required else f"( {block} )?")
        head = b.literal(f"<tool_call>\n<function={name}>\n")
        return " ".join([head, *blocks, b.literal("</function>\n</tool_call>")])
    finally:
        b._root = saved
