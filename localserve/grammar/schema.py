"""JSON Schema → GBNF: GrammarBuilder walks a schema and accumulates the named rules that match
exactly the JSON valid for it, refusing with SchemaError what it cannot enforce.

- An object schema with ``properties`` (even empty) but no ``additionalProperties`` allows no
  other keys, as in OpenAI strict mode; ``{"type": "object"}`` without them is any object.
  Declared keys come in schema order, required ones first; optional ones may be left out.
- ``oneOf`` is taken as ``anyOf``: its branches should not overlap. ``format`` date, time,
  date-time and uuid write a safe subset (days 01-28, years 1000-9999); other formats are
  plain strings. ``pattern`` goes to regex.py, numeric bounds to numbers.py, ``allOf`` to
  all_of.py's merge.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import unquote

from .all_of import ANNOTATIONS, canon, merge_all_of
from .gbnf import PRIMITIVES, RULE_NAME, STRING_FORMATS, SchemaError, json_text, repeat
from .numbers import bounds, signed_range
from .object_members import key_not_in, object_members
from .regex import translate_pattern
from .limits import MAX_GRAMMAR_BYTES, MAX_PATTERN_CHARS, MAX_SCHEMA_DEPTH

_TYPES = ("string", "number", "integer", "boolean", "null", "object", "array")
_INFER = (  # keywords that imply a type when "type" is absent
    ("object", ("properties", "additionalProperties", "required", "minProperties", "maxProperties")),
    ("array", ("items", "prefixItems", "minItems", "maxItems")),
    ("string", ("minLength", "maxLength", "pattern", "format")),
    ("number", ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")))
_UNSUPPORTED = frozenset({
    "not", "if", "then", "else", "contains", "minContains", "maxContains", "dependentSchemas",
    "dependentRequired", "dependencies", "propertyNames", "unevaluatedItems",
    "unevaluatedProperties", "$dynamicRef", "$recursiveRef"})
_LITERAL_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_QUOTED_OR_CLASS = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]')
_IS_TYPE = {
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None}


def _count(s: dict, key: str, default, path: str):
    value = s.get(key, default)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise SchemaError(f"{path}.{key}: must be a non-negative integer")
    return value


class GrammarBuilder:
    """Accumulates named GBNF rules; shared primitives (ws, string, number, …) added once."""

    def __init__(self) -> None:
        self._rules: dict[str, str] = {}
        self._suffixes: dict[str, int] = {}  # base name -> the last suffix tried: finding a free name is O(1)
        self._size = 0  # bytes of the rules so far: the grammar is at least this long
        self._pattern_chars = 0  # characters of the patterns translated so far
        self._memo: dict[tuple[int, str], str] = {}  # (document, schema) -> rule
        self._refs: dict[tuple[int, str], str] = {}  # (document, $ref) -> rule
        self._documents: list = []  # keeps documents alive, so that their ids stay unique
        self._root: dict = {}
        self._bare_refs: set[tuple[int, str]] = set()  # refs entered with no "{" or "[" since
        self._depth = 0  # schemas being visited, one inside the other

    def literal(self, text: str) -> str:
        """A GBNF literal matching exactly ``text`` (non-ASCII is written as UTF-8)."""
        if "\x00" in text:
            raise ValueError("llama.cpp grammars cannot match U+0000")
        text.encode("utf-8")  # lone surrogates cannot be matched either: raise now
        return '"' + "".join(_LITERAL_ESCAPES.get(c) or (
            f"\\x{ord(c):02X}" if ord(c) < 0x20 else c) for c in text) + '"'

    def add_rule(self, name: str, body: str) -> str:
        """Add ``name ::= body``; returns the name used, made unique if already taken."""
        base = "-".join(RULE_NAME.findall(name.replace("_", "-"))) or "rule"
        if body and self._rules.get(base) == body:
            return base
        candidate, n = base, self._suffixes.get(base, 1)
        if n > 1:
            candidate = f"{base}-{n}"
        while candidate in self._rules or candidate in PRIMITIVES or candidate == "root":
            n += 1
            candidate = f"{base}-{n}"
        self._suffixes[base] = n
        self._size += len(candidate) + len(body.encode("utf-8", "surrogatepass")) + 5
        if self._size > MAX_GRAMMAR_BYTES:  # refused anyway once built: stop before the rest is walked
            raise SchemaError(f"the grammar it needs is over {MAX_GRAMMAR_BYTES} bytes (MAX_GRAMMAR_BYTES)")
        self._rules[candidate] = body
        return candidate

    def add_schema(self, schema: dict, name_hint: str = "value") -> str:
        """Add rules for a JSON schema; returns a rule name matching JSON valid for it."""
        return self.add_document(schema, name_hint, "schema")

    def build(self, root_body: str) -> str:
        """The full grammar text, ``root ::= root_body`` first, then every rule used."""
        rules = dict(self._rules)
        pending = [root_body, *rules.values()]
        while pending:
            for word in RULE_NAME.findall(_QUOTED_OR_CLASS.sub(" ", pending.pop())):
                if word in PRIMITIVES and word not in rules:
                    rules[word] = PRIMITIVES[word]
                    pending.append(rules[word])
        return "".join(f"{n} ::= {b}\n" for n, b in {"root": root_body, **rules}.items())

    # -- schema walk --

    def add_document(self, schema, hint: str, path: str) -> str:
        """A rule matching JSON valid for ``schema``, a whole document (its own $ref root)."""
        if not isinstance(schema, dict):
            raise SchemaError(f"{path}: a schema must be a JSON object, not {type(schema).__name__}")
        with self.document(schema):
            return self._visit(schema, path, hint)

    @contextmanager
    def document(self, schema) -> Iterator[None]:
        """Within: ``$ref``s resolve against ``schema`` (for callers that walk it themselves)."""
        saved, self._root = self._root, schema
        self._documents.append(schema)
        try:
            yield
        finally:
            self._root = saved

    def deref(self, s, path: str):
        """``s``, or what its ``$ref`` points to in the current document."""
        return self._resolve(s["$ref"], path) if isinstance(s, dict) and "$ref" in s else s

    def add_value(self, s, path: str, hint: str) -> str:
        """A rule for a schema inside the current document (see ``document``)."""
        return self._visit(s, path, hint)

    def raw_string(self, s: dict, path: str) -> str:
        """A string schema as bare text: no quotes, no escapes, no '<'."""
        return self._string(s, path, raw=True)

    def _visit(self, s, path: str, hint: str) -> str:
        """A rule name for schema ``s`` (shared between identical schemas)."""
        s = {} if s is True else s
        if not isinstance(s, dict):
            raise SchemaError(f"{path}: a schema must be a JSON object or true, not {s!r}")
        key = (id(self._root), canon(s))
        if key not in self._memo:
            body = self._nested_body(s, path, hint)
            self._memo[key] = body if RULE_NAME.fullmatch(body) else self.add_rule(hint, body)
        return self._memo[key]

    def _nested_body(self, s, path: str, hint: str) -> str:
        """_body one level deeper; the walk is recursive, so its depth is bounded (and named)."""
        if self._depth >= MAX_SCHEMA_DEPTH:
            raise SchemaError(f"{path}: the schema nests deeper than {MAX_SCHEMA_DEPTH} levels "
                              f"(subschemas and $refs one inside the other)")
        self._depth += 1
        try:
            return self._body(s, path, hint)
        finally:
            self._depth -= 1

    def _ref(self, ref, path: str) -> str:
        if not isinstance(ref, str):        # before it is used as a key: a list or object can't be one
            raise SchemaError(f"{path}: $ref must be a string, not {ref!r}")
        key = (id(self._root), ref)
        if key in self._bare_refs:
            raise SchemaError(f"{path}: $ref {ref!r} refers back to itself without nesting")
        if key not in self._refs:
            target = self._resolve(ref, path)
            name = self._refs[key] = self.add_rule(ref.rsplit("/", 1)[-1].strip("#") or "root-ref", "")
            self._bare_refs.add(key)
            try:
                self._rules[name] = self._nested_body(target, ref, name)
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
        rest = {k: v for k, v in s.items() if k not in ANNOTATIONS}
        if "$ref" in rest:
            ref = rest.pop("$ref")
            if not rest:
                return self._ref(ref, path)
            # through _nested_body: a merge can bring back the $ref it began from ({"$ref": "#"})
            return self._nested_body(merge_all_of([{"$ref": ref}, rest], path, self._resolve), path, hint)
        unsupported = sorted(_UNSUPPORTED & s.keys())
        if unsupported:
            raise SchemaError(f"{path}: keyword {unsupported[0]!r} is not supported")
        if "allOf" in rest:
            subs = rest.pop("allOf")
            if not isinstance(subs, list) or not subs:
                raise SchemaError(f"{path}.allOf: must be a non-empty list of schemas")
            return self._nested_body(merge_all_of([rest, *subs], f"{path}.allOf", self._resolve), path, hint)
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
            sub = merge_all_of([s, branch], f"{path}.{key}[{i}]", self._resolve) if s else branch
            alts.append(self._visit(sub, f"{path}.{key}[{i}]", f"{hint}-{i}"))
        return " | ".join(dict.fromkeys(alts))

    def _enum(self, s: dict, path: str) -> str:
        values = s["enum"] if "enum" in s else [s["const"]]
        if not isinstance(values, list) or not values:
            raise SchemaError(f"{path}.enum: must be a non-empty list")
        if "const" in s:
            values = [v for v in values if canon(v) == canon(s["const"])]
        types = self._types({"type": s["type"]}, path) if "type" in s else None
        kept = [v for v in values if types is None or any(_IS_TYPE[t](v) for t in types)]
        if not kept:
            raise SchemaError(f"{path}: no enum/const value satisfies the schema's type")
        return " | ".join(dict.fromkeys(self.literal(json_text(v, path)) for v in kept))

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
            self._pattern_chars += len(s["pattern"])
            if self._pattern_chars > MAX_PATTERN_CHARS:     # each character costs a step to translate
                raise SchemaError(f"{path}.pattern: the schema's patterns are over {MAX_PATTERN_CHARS} characters "
                                  f"together (MAX_PATTERN_CHARS)")
            inner = translate_pattern(self, s["pattern"], raw, f"{path}.pattern")
        elif s.get("format") in STRING_FORMATS and not lo and hi is None:
            inner = STRING_FORMATS[s["format"]]
        else:
            inner = repeat("rawchar" if raw else "char", lo, hi, path) or '""'
        return inner if raw else f'"\\"" {inner} "\\""'

    def _numeric(self, s: dict, path: str, integer: bool) -> str:
        if s.get("multipleOf") is not None and not (integer and s["multipleOf"] == 1):
            raise SchemaError(f"{path}: keyword 'multipleOf' is not supported")
        lo, hi = bounds(s, path)
        if lo is None and hi is None:
            return "integer" if integer else "number"
        if lo is not None and hi is not None and lo > hi:
            raise SchemaError(f"{path}: no {'integer' if integer else 'number'} this grammar can "
                              "write lies within minimum/maximum")
        return signed_range(lo, hi, fraction=not integer)

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
        required = set(required)  # looked up once per name below: a list made that quadratic
        least, most = _count(s, "minProperties", 0, path), _count(s, "maxProperties", None, path)
        if least > len(required) or (most is not None and (extra is not False or most < len(names))):
            raise SchemaError(f"{path}: minProperties/maxProperties are not supported here")
        order = [k for k in names if k in required] + [k for k in names if k not in required]
        saved, self._bare_refs = self._bare_refs, set()  # "{" is written before any member
        try:
            members = {}
            for k in order:
                value = self._visit(props.get(k, extra if isinstance(extra, dict) else {}),
                                    f"{path}.properties.{k}", f"{hint}-{k}")
                key = self.literal(json_text(k, path))
                members[k] = self.add_rule(f"{hint}-{k}-kv", f'{key} ws ":" ws {value}')
            extra_kv = None
            if extra is not False:
                value = self._visit(extra, f"{path}.additionalProperties", f"{hint}-extra")
                extra_kv = self.add_rule(f"{hint}-extra-kv", f'{key_not_in(self, names, path)} ws ":" ws {value}')
        finally:
            self._bare_refs = saved
        return object_members(self, hint, [members[k] for k in order if k in required],
                              [members[k] for k in order if k not in required], extra_kv)

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
                    elems[-1] += " " + repeat(more, max(lo - n, 0), None if hi is None else hi - n, path)
                else:
                    elems = [f"{item} {repeat(more, max(lo - 1, 0), None if hi is None else hi - 1, path)}"]
        finally:
            self._bare_refs = saved
        if not elems:
            return '"[" ws "]"'
        elems = [e.strip() for e in elems]
        first = max(lo, 1)  # the elements before the first that may be left out (all, past minItems)
        rest = ""
        for elem in reversed(elems[first:]):  # each only after the one before: a rule each, as groups
            rest = " " + self.add_rule(f"{hint}-tail", f'( ws "," ws {elem}{rest} )?')  # nested past llama.cpp's parser
        seq = ' ws "," ws '.join(elems[:first]) + rest
        return f'"[" ws {seq} ws "]"' if lo else f'"[" ws ( {seq} ws )? "]"'
