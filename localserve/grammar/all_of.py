"""``allOf`` (and a ``$ref`` beside other keywords) merged into one schema, for the simple cases
JSON Schema → GBNF can write; SchemaError for the rest."""

from __future__ import annotations

from typing import Callable

import orjson

from .gbnf import SchemaError
from .limits import MAX_ALL_OF_BRANCHES

ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$anchor", "strict",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "contentEncoding", "contentMediaType"})
OBJECT_KEYS = ("properties", "additionalProperties", "required")


def canon(value) -> str:
    """A key that is equal for equal JSON values, whatever their key order."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=repr).decode()
    except TypeError:             # orjson.JSONEncodeError: e.g. an integer past 64 bits
        return repr(value)


def merge_all_of(schemas: list, path: str, resolve: Callable[[object, str], object], depth: int = 0) -> dict:
    """One schema equivalent to allOf(schemas), for the simple cases; else SchemaError.
    ``resolve(ref, path)`` is what a ``$ref`` in them points to."""
    if depth > 16:
        raise SchemaError(f"{path}: allOf/$ref nesting too deep to merge")
    schemas = [sub for sub in schemas if sub is not True and sub != {}]
    if len(schemas) > MAX_ALL_OF_BRANCHES:      # merging objects costs their keys times the branches
        raise SchemaError(f"{path}: allOf has more than {MAX_ALL_OF_BRANCHES} branches (MAX_ALL_OF_BRANCHES)")
    if len(schemas) == 1 and isinstance(schemas[0], dict) and "allOf" not in schemas[0]:
        return schemas[0]  # nothing to merge: a $ref in it stays a reference
    flat = []
    for sub in schemas:
        if not isinstance(sub, dict):
            raise SchemaError(f"{path}: a schema must be a JSON object, not {sub!r}")
        sub = {k: v for k, v in sub.items() if k not in ANNOTATIONS}
        if "$ref" in sub:
            sub = merge_all_of([resolve(sub.pop("$ref"), path), sub], path, resolve, depth + 1)
        if "allOf" in sub:
            sub = merge_all_of([*sub.pop("allOf"), sub], path, resolve, depth + 1)
        flat.append(sub)
    out: dict = {}
    for k, v in ((k, v) for sub in flat for k, v in sub.items() if k not in OBJECT_KEYS):
        if k not in out or canon(out[k]) == canon(v):
            out[k] = v
        elif k == "type":
            a, b = ({x} if isinstance(x, str) else set(x) for x in (out[k], v))
            a, b = (x | {"integer"} if "number" in x else x for x in (a, b))
            out[k] = sorted(a & b) or _fail(f"{path}: allOf branches allow no common type")
        elif k in ("minimum", "exclusiveMinimum", "minLength", "minItems"):
            out[k] = max(out[k], v)
        elif k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems"):
            out[k] = min(out[k], v)
        else:
            raise SchemaError(f"{path}: cannot merge differing {k!r} in allOf")
    objects = [sub for sub in flat if any(k in sub for k in OBJECT_KEYS)]
    return out | (_merge_objects(objects, path, resolve, depth) if objects else {})

def _merge_objects(subs: list[dict], path: str, resolve: Callable[[object, str], object], depth: int) -> dict:
    def allowed(sub, k):  # the schema sub gives key k: absent additionalProperties allow any
        props = sub.get("properties", {})
        return props[k] if k in props else sub.get("additionalProperties", True)

    names = dict.fromkeys(k for sub in subs for k in sub.get("properties", {}))
    parts = {k: [allowed(sub, k) for sub in subs] for k in names}
    extras = [sub.get("additionalProperties", True) for sub in subs]
    out = {"properties": {k: merge_all_of(p, f"{path}.properties.{k}", resolve, depth + 1)
                          for k, p in parts.items() if False not in p},
           "required": list(dict.fromkeys(r for sub in subs for r in sub.get("required", [])))}
    if False in extras:
        out["additionalProperties"] = False
    elif any(isinstance(e, dict) for e in extras):
        out["additionalProperties"] = merge_all_of(extras, f"{path}.additionalProperties", resolve, depth + 1)
    return out


def _fail(message: str):
    raise SchemaError(message)
