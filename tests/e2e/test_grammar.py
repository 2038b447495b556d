"""localserve.grammar.grammar through llama.cpp's own GBNF parser and grammar sampler.

A tiny random-weight model (tests/support/tinymodel.py) samples under each grammar, greedily and with
temperature over several seeds; whatever comes out must parse with a strict json.loads and
validate against the schema (a small validator below: jsonschema is not a dependency), or
parse as a tool call in the family's syntax. The sampling loop applies the grammar itself, so
a grammar that dead-ends fails the test instead of aborting llama.cpp (and the process).
"""

from __future__ import annotations

import ctypes
import datetime
import json
import math
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as L      # a broken engine install must fail these tests, not skip them
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from localserve.grammar.grammar import (
    MAX_REPEAT,
    TOOL_CALL_SYNTAXES,
    WS_MAX_INDENT,
    GrammarBuilder,
    SchemaError,
    json_object_grammar,
    json_schema_grammar,
    tool_call_grammar,
    validate_schema,
)
from localserve.parsing.tools import parse_generated_tools

from tinymodel import BOS_ID, BYTE_TOKEN_OFFSET, EOS_ID, token_ids, write_tiny_gguf  # tests/support/

SPECIALS = (
    "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "<|python_tag|>",
    "<|channel|>", "<|constrain|>", "<|message|>", "<|call|>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁calls▁end｜>",
)
IDS = token_ids(SPECIALS)
SEEDS = (0, 1, 2, 3, 4)
PROPERTY_SETTINGS = settings(max_examples=60, deadline=None,
                             suppress_health_check=[HealthCheck.function_scoped_fixture])


# llama.cpp's grammar decodes UTF-8 leniently: an overlong sequence (E0 80-9F .., F0 80-8F ..
# ..) decodes to a code point that a character class accepts, so with byte-fallback tokens a
# grammar cannot keep it out (test_overlong_utf8_gets_through shows it). Real models do not
# write those bytes; the random one here would, so the sampler masks them unless told not to.
_BYTE = BYTE_TOKEN_OFFSET
OVERLONG_AFTER = {_BYTE + 0xE0: [_BYTE + b for b in range(0x80, 0xA0)],
                  _BYTE + 0xF0: [_BYTE + b for b in range(0x80, 0x90)]}


@L.llama_log_callback
def _quiet_log(level, text, user_data):
    pass


@dataclass
class Output:
    text: str
    tokens: list[int]
    finished: bool  # ended on an end-of-generation token, not on the token cap


class Sampler:
    """A tiny model and a context; samples token by token under a grammar sampler."""

    def __init__(self, path: Path) -> None:
        self.model = L.llama_model_load_from_file(os.fsencode(path), L.llama_model_default_params())
        assert self.model
        params = L.llama_context_default_params()
        params.n_ctx = params.n_batch = 2048
        params.n_threads = params.n_threads_batch = 1
        self.ctx = L.llama_init_from_model(self.model, params)
        assert self.ctx
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = L.llama_vocab_n_tokens(self.vocab)
        self.data = (L.llama_token_data * self.n_vocab)()
        self.view = np.ctypeslib.as_array(self.data)
        self.pieces = [self._piece(t) for t in range(self.n_vocab)]

    def close(self) -> None:
        L.llama_free(self.ctx)
        L.llama_model_free(self.model)

    def _piece(self, token: int) -> bytes:
        buf = ctypes.create_string_buffer(128)
        n = L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, True)
        assert n >= 0
        return buf.raw[:n]

    def accepts(self, grammar: str) -> bool:
        """Whether llama.cpp's GBNF parser takes the grammar (NULL sampler on a parse error)."""
        smpl = L.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        if smpl:
            L.llama_sampler_free(smpl)
        return bool(smpl)

    def allows(self, grammar: str, tokens: list[int]) -> bool:
        """Whether the grammar lets these tokens come one after another and then ends."""
        smpl = L.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        assert smpl
        try:
            for token in [*tokens, L.llama_vocab_eos(self.vocab)]:
                self.view["id"] = np.arange(self.n_vocab)
                self.view["logit"] = 0.0
                cur = L.llama_token_data_array(ctypes.cast(self.data, L.llama_token_data_p), self.n_vocab, -1, False)
                L.llama_sampler_apply(smpl, ctypes.byref(cur))
                if not np.isfinite(self.view["logit"][token]):
                    return False
                if token != L.llama_vocab_eos(self.vocab):
                    L.llama_sampler_accept(smpl, token)
            return True
        finally:
            L.llama_sampler_free(smpl)

    def _decode(self, tokens: list[int]) -> None:
        arr = (L.llama_token * len(tokens))(*tokens)
        assert L.llama_decode(self.ctx, L.llama_batch_get_one(arr, len(tokens))) == 0

    def generate(self, grammar: str, *, seed: int = 0, temperature: float = 0.0,
                 max_tokens: int = 400, bias: dict[int, float] | None = None,
                 strict_utf8: bool = True) -> Output:
        smpl = L.llama_sampler_init_grammar(self.vocab, grammar.encode(), b"root")
        assert smpl, f"llama.cpp rejected the grammar:\n{grammar}"
        rng = np.random.default_rng(seed)
        L.llama_memory_clear(L.llama_get_memory(self.ctx), True)
        # a prompt of a few random text tokens, so that seeds differ even when greedy
        self._decode([BOS_ID, *map(int, rng.integers(BYTE_TOKEN_OFFSET + 256, BYTE_TOKEN_OFFSET + 350, 3))])
        bias_vec = np.zeros(self.n_vocab, dtype=np.float32)
        for token, value in (bias or {}).items():
            bias_vec[token] = value
        out: list[int] = []
        try:
            for _ in range(max_tokens):
                logits = np.ctypeslib.as_array(L.llama_get_logits_ith(self.ctx, -1), shape=(self.n_vocab,))
                self.view["id"] = np.arange(self.n_vocab)
                self.view["logit"] = logits + bias_vec
                self.view["p"] = 0.0
                cur = L.llama_token_data_array(ctypes.cast(self.data, L.llama_token_data_p), self.n_vocab, -1, False)
                L.llama_sampler_apply(smpl, ctypes.byref(cur))
                assert cur.size == self.n_vocab
                masked = self.view["logit"].astype(np.float64)
                if strict_utf8 and out and out[-1] in OVERLONG_AFTER:
                    masked[OVERLONG_AFTER[out[-1]]] = -np.inf
                ok = np.isfinite(masked)
                assert ok.any(), f"grammar dead end after {self.text(out)!r}:\n{grammar}"
                if temperature <= 0:
                    token = int(self.view["id"][np.argmax(np.where(ok, masked, -np.inf))])
                else:
                    z = np.where(ok, masked / temperature, -np.inf)
                    p = np.exp(z - z[ok].max())
                    token = int(self.view["id"][rng.choice(self.n_vocab, p=p / p.sum())])
                if L.llama_vocab_is_eog(self.vocab, token):
                    return Output(self.text(out), out, True)
                L.llama_sampler_accept(smpl, token)
                out.append(token)
                self._decode([token])
            return Output(self.text(out, partial=True), out, False)
        finally:
            L.llama_sampler_free(smpl)

    def text(self, tokens: list[int], partial: bool = False) -> str:
        """The output as text: strictly valid UTF-8, unless cut off (maybe inside a character)."""
        return b"".join(self.pieces[t] for t in tokens).decode("utf-8", "replace" if partial else "strict")


@pytest.fixture(scope="module")
def sampler(tmp_path_factory):
    L.llama_log_set(_quiet_log, ctypes.c_void_p(0))
    # one 64-wide head: CPU flash attention decodes 16-wide heads ~9x slower (test_template_calls.py)
    path = write_tiny_gguf(tmp_path_factory.mktemp("grammar") / "tiny.gguf", special_tokens=SPECIALS, n_head=1)
    engine = Sampler(path)
    yield engine
    engine.close()
    from llama_cpp import _logger
    L.llama_log_set(_logger.llama_log_callback, ctypes.c_void_p(0))


# --- a small JSON Schema validator (the subset the grammars claim to enforce) --------------------

def _resolve(root: dict, ref: str):
    node = root
    for part in ref[1:].split("/")[1:]:
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


def _type_ok(value, t: str) -> bool:
    return {
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool)
        or isinstance(v, float) and v.is_integer(),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        "null": lambda v: v is None,
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
    }[t](value)


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True) and type(a) is type(b) or (
        _type_ok(a, "number") and _type_ok(b, "number") and a == b)


FORMAT_CHECKS = {
    "date": datetime.date.fromisoformat,
    "date-time": lambda v: datetime.datetime.fromisoformat(v.replace("Z", "+00:00")),
    "time": lambda v: datetime.time.fromisoformat(v.replace("Z", "+00:00")),
    "uuid": lambda v: uuid.UUID(v) and re.fullmatch(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", v),
}


def validate(value, schema, root=None, path="$") -> None:
    """Raise AssertionError naming the path where ``value`` breaks ``schema``."""
    root = schema if root is None else root
    if schema is True or schema == {}:
        return
    assert schema is not False, f"{path}: nothing is allowed here"
    if value is None and schema.get("nullable") is True:
        return
    if "$ref" in schema:
        validate(value, _resolve(root, schema["$ref"]), root, path)
    for sub in schema.get("allOf", []):
        validate(value, sub, root, path)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            passed = 0
            for sub in schema[key]:
                try:
                    validate(value, sub, root, path)
                    passed += 1
                except AssertionError:
                    pass
            assert passed == 1 if key == "oneOf" else passed >= 1, f"{path}: {key} matched {passed}"
    if "const" in schema:
        assert _same(value, schema["const"]), f"{path}: {value!r} != const"
    if "enum" in schema:
        assert any(_same(value, v) for v in schema["enum"]), f"{path}: {value!r} not in enum"
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        assert any(_type_ok(value, t) for t in types), f"{path}: {value!r} is not {types}"
    if isinstance(value, str):
        n = len(value)
        assert n >= schema.get("minLength", 0) and n <= schema.get("maxLength", n), f"{path}: length {n}"
        if "pattern" in schema:
            assert re.search(schema["pattern"], value), f"{path}: {value!r} !~ {schema['pattern']}"
        if schema.get("format") in FORMAT_CHECKS:
            assert FORMAT_CHECKS[schema["format"]](value), f"{path}: bad {schema['format']}"
    if _type_ok(value, "number"):
        assert value >= schema.get("minimum", value), f"{path}: {value} < minimum"
        assert value <= schema.get("maximum", value), f"{path}: {value} > maximum"
        assert "exclusiveMinimum" not in schema or value > schema["exclusiveMinimum"], path
        assert "exclusiveMaximum" not in schema or value < schema["exclusiveMaximum"], path
        assert math.isfinite(value), f"{path}: {value}"
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key in schema.get("required", []):
            assert key in value, f"{path}: missing {key!r}"
        for key, item in value.items():
            if key in props:
                validate(item, props[key], root, f"{path}.{key}")
            else:
                validate(item, schema.get("additionalProperties", True), root, f"{path}.{key}")
    if isinstance(value, list):
        n = len(value)
        assert schema.get("minItems", 0) <= n <= schema.get("maxItems", n), f"{path}: {n} items"
        prefix = schema.get("prefixItems", [])
        for i, item in enumerate(value):
            validate(item, prefix[i] if i < len(prefix) else schema.get("items", True), root, f"{path}[{i}]")


# --- schemas sampled end to end --------------------------------------------------------------------

NODE = {"type": "object", "properties": {"v": {"type": "integer", "minimum": 0, "maximum": 99},
                                         "next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}},
        "required": ["v", "next"]}
SCHEMAS = {
    "nested-object": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 150},
            "address": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 10},
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}, "required": ["city"]},
            "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3},
        },
        "required": ["name", "age"],
    },
    "array-of-bounded-ints": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5},
                              "minItems": 1, "maxItems": 4},
    "enum-mixed": {"enum": ["red", "green", 1, None, {"a": [1, 2]}, "quote\"back\\slash\nnl"]},
    "any-of": {"anyOf": [{"type": "string", "maxLength": 5},
                         {"type": "object", "properties": {"x": {"type": "boolean"}}, "required": ["x"]},
                         {"type": "null"}]},
    "one-of-disjoint": {"oneOf": [{"type": "integer", "minimum": 10, "maximum": 20},
                                  {"type": "boolean"}]},
    "const-with-escapes": {"const": "tab\there \"q\" \\ \u0001 é 𝄞"},
    "string-short": {"type": "string", "maxLength": 16},
    "string-min-max": {"type": "string", "minLength": 3, "maxLength": 6},
    "pattern-needing-escapes": {"type": "string", "pattern": '^["\\\\\\n\\t]{1,5}$'},
    "pattern-unanchored": {"type": "string", "pattern": "[0-9]|_"},
    "pattern-classes": {"type": "string", "pattern": r"^\d{3}-[A-Fa-f]{2}(x|yz)?\.\w$"},
    "integer-minimum": {"type": "integer", "minimum": 7},
    "integer-minimum-zero": {"type": "integer", "minimum": 0},
    "integer-range": {"type": "integer", "exclusiveMinimum": -3, "maximum": 1234},
    "integer-negative": {"type": "integer", "minimum": -250, "maximum": -17},
    "number-range": {"type": "number", "minimum": -2.5, "maximum": 3},
    "number-positive": {"type": "number", "exclusiveMinimum": 0},
    "number-nonpositive": {"type": "number", "maximum": 0},
    "number-free": {"type": "number"},
    "ref-linked-list": {"$defs": {"node": NODE}, "$ref": "#/$defs/node"},
    "ref-tree-depth": {
        "definitions": {"tree": {"type": "object", "properties": {
            "leaf": {"type": "boolean"},
            "kids": {"type": "array", "items": {"$ref": "#/definitions/tree"}, "maxItems": 1}},
            "required": ["leaf"]}},
        "type": "object", "properties": {"root": {"$ref": "#/definitions/tree"}}, "required": ["root"]},
    "formats": {"type": "object", "properties": {
        "d": {"type": "string", "format": "date"},
        "dt": {"type": "string", "format": "date-time"},
        "t": {"type": "string", "format": "time"},
        "u": {"type": "string", "format": "uuid"},
        "other": {"type": "string", "format": "email", "maxLength": 8}}, "required": ["d", "dt", "t", "u"]},
    "additional-schema": {"type": "object", "properties": {"a": {"type": "integer"}, "ab": {"type": "null"}},
                          "required": ["a"], "additionalProperties": {"type": "boolean"}},
    "additional-only": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
    "optional-only": {"type": "object", "properties": {"p": {"type": "boolean"}, "q": {"type": "null"},
                                                       "r": {"const": 3}}},
    "no-extra-keys-default": {"type": "object", "properties": {"k": {"type": "integer"}}},
    "prefix-items": {"type": "array", "prefixItems": [{"type": "string", "maxLength": 3}, {"type": "boolean"}],
                     "items": False, "minItems": 1},
    "prefix-then-items": {"type": "array", "prefixItems": [{"const": "head"}],
                          "items": {"type": "integer", "maximum": 9}, "minItems": 2, "maxItems": 4},
    "all-of-merge": {"allOf": [
        {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0}}, "required": ["a"]},
        {"properties": {"b": {"type": "string", "maxLength": 4}, "a": {"maximum": 9}}, "required": ["b"]}]},
    "nullable-type-list": {"type": ["string", "null"], "maxLength": 4},
    "nullable-openapi": {"type": "integer", "nullable": True, "minimum": 0, "maximum": 3},
    "bool-and-null": {"type": ["boolean", "null"]},
    "untyped-properties": {"properties": {"x": {"type": "integer"}}, "required": ["x"]},
    "empty-object": {"type": "object", "properties": {}},
    "empty-array": {"type": "array", "maxItems": 0},
    "weird-keys": {"type": "object", "properties": {"a\"b": {"type": "null"}, "é\n": {"type": "boolean"},
                                                    "": {"const": 0}},
                   "required": ["a\"b", "é\n", ""]},
}
# Free-form ones: any JSON value can nest and run on, so these get a larger token cap.
OPEN_ENDED = {"any-value": {}, "any-object": {"type": "object"}}
# An unbounded string ends only when the closing quote is sampled: among ~700 allowed tokens
# a random model takes hundreds of tokens to get there. Where a schema leaves a string
# unbounded (free keys, unanchored patterns, free values) a logit bias towards closing
# tokens keeps the output short; it changes which output comes, never what is allowed.
# Likewise a recursive $ref can nest without end when greedy decoding keeps choosing to
# recurse: there the bias is towards the way out.
CLOSE_BIAS = {IDS[t]: 5.0 for t in ('"', '"}', '",', '":', "}", "]", "}}", "]}")} | {IDS['"']: 8.0}
BIASES = {name: CLOSE_BIAS for name in ("additional-schema", "additional-only", *OPEN_ENDED)}
BIASES["pattern-unanchored"] = {IDS['"']: 10.0}
BIASES["ref-linked-list"] = {IDS["null"]: 4.0, IDS["nu"]: 4.0, IDS["n"]: 4.0}
BIASES["ref-tree-depth"] = {IDS["]"]: 4.0, IDS["]}"]: 4.0}


def _check_json(sampler, grammar, schema, name, max_tokens=400):
    bias = BIASES.get(name)
    for seed in SEEDS:
        for temperature in (0.0, 1.0):
            out = sampler.generate(grammar, seed=seed, temperature=temperature, max_tokens=max_tokens,
                                   bias=bias)
            assert out.finished, f"{name} seed {seed} t={temperature}: cut off at {out.text[-200:]!r}"
            value = json.loads(out.text)  # strict: control characters in strings are rejected
            try:
                validate(value, schema)
            except AssertionError as exc:
                raise AssertionError(f"{name} seed {seed} t={temperature}: {out.text!r}: {exc}") from None


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_schema_output_parses_and_validates(sampler, name):
    schema = SCHEMAS[name]
    grammar = json_schema_grammar(schema)
    assert sampler.accepts(grammar), grammar
    validate_schema(schema)
    _check_json(sampler, grammar, schema, name)


@pytest.mark.parametrize("name", sorted(OPEN_ENDED))
def test_open_ended_output_terminates(sampler, name):
    schema = OPEN_ENDED[name]
    _check_json(sampler, json_schema_grammar(schema), schema, name, max_tokens=1500)


def test_recursive_ref_nests(sampler):
    # A linked list through "$ref": "#": outputs of several depths, each one valid.
    schema = SCHEMAS["ref-linked-list"]
    grammar = json_schema_grammar(schema)
    depths = set()
    for seed in range(12):
        out = sampler.generate(grammar, seed=seed, temperature=1.0, bias=BIASES["ref-linked-list"])
        node, depth = json.loads(out.text), 0
        validate(node, schema)
        while node is not None:
            node, depth = node["next"], depth + 1
        depths.add(depth)
    assert len(depths) >= 2 and max(depths) >= 2, depths


def test_json_object_grammar(sampler):
    grammar = json_object_grammar()
    assert sampler.accepts(grammar)
    for seed in SEEDS:
        out = sampler.generate(grammar, seed=seed, temperature=1.0, max_tokens=1500, bias=CLOSE_BIAS)
        assert out.finished and isinstance(json.loads(out.text), dict), out.text


def test_whitespace_is_capped(sampler):
    # Push the model towards whitespace as hard as possible: it still has to move on.
    space, newline, tab = IDS["▁"], BYTE_TOKEN_OFFSET + 0x0A, BYTE_TOKEN_OFFSET + 0x09
    bias = {space: 40.0, newline: 40.0, tab: 40.0, BYTE_TOKEN_OFFSET + 0x20: 40.0}
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"},
                                                     "maxItems": 2}}, "required": ["a"]}
    out = sampler.generate(json_schema_grammar(schema), bias=bias, max_tokens=400)
    assert out.finished, out.text
    validate(json.loads(out.text), schema)
    runs = re.findall(r"\s+", out.text)
    assert runs and max(map(len, runs)) <= WS_MAX_INDENT + 1


# --- exactly what a grammar accepts: text written byte by byte ---------------------------------

def byte_tokens(text: str) -> list[int]:
    return [_BYTE + b for b in text.encode("utf-8")]


ADDITIONAL = SCHEMAS["additional-schema"]
RANGE = SCHEMAS["integer-range"]
NUMBER_RANGE = SCHEMAS["number-range"]
PATTERN = SCHEMAS["pattern-classes"]
QUOTES = {"type": "string", "pattern": '^["\\\\]$'}
ACCEPTS = [
    (ADDITIONAL, '{"a":1,"ab":null,"x":true}', True),
    (ADDITIONAL, '{"a":1,"abc":true,"":false,"b":true}', True),
    (ADDITIONAL, '{"a":1,"a":true}', False),  # an extra key never repeats a declared one
    (ADDITIONAL, '{"a":1,"ab":true}', False),
    (ADDITIONAL, '{"a":1,"x":true,"ab":null}', False),  # declared keys first, in order
    (ADDITIONAL, '{"ab":null,"a":1}', False),
    (ADDITIONAL, '{ "a" : 1 ,\n\t"x":false }', True),
    (ADDITIONAL, '{"a":1' + " " * (WS_MAX_INDENT + 2) + "}", False),
    (ADDITIONAL, '{"a":1\n' + " " * WS_MAX_INDENT + "}", True),
    (ADDITIONAL, '{"a":1\n' + " " * (WS_MAX_INDENT + 1) + "}", False),
    ({"type": "string"}, '"\\u0041\\u00e9\\ud7ff\\n\\/"', True),
    ({"type": "string"}, '"\\ud800"', False),  # a lone surrogate escape
    ({"type": "string"}, '"a\x01"', False),  # a raw control character
    ({"type": "string"}, '"é€𝄞"', True),
    (RANGE, "-2", True), (RANGE, "-3", False), (RANGE, "1234", True), (RANGE, "1235", False),
    (RANGE, "0", True), (RANGE, "-0", False), (RANGE, "007", False), (RANGE, "999", True),
    (NUMBER_RANGE, "-2.0", True), (NUMBER_RANGE, "-1.75", True), (NUMBER_RANGE, "2.999", True),
    (NUMBER_RANGE, "3.000", True), (NUMBER_RANGE, "3.01", False), (NUMBER_RANGE, "-2.01", False),
    (NUMBER_RANGE, "1e2", False),
    (PATTERN, '"123-aF.z"', True), (PATTERN, '"123-aFyz._"', True), (PATTERN, '"12-aF.z"', False),
    (PATTERN, '"123-aFx.zz"', False), (PATTERN, '"123-aG.z"', False),
    (QUOTES, '"\\""', True), (QUOTES, '"\\\\"', True), (QUOTES, '"""', False), (QUOTES, '"a"', False),
    ({"type": "string", "format": "date"}, '"2024-02-28"', True),
    ({"type": "string", "format": "date"}, '"2024-02-30"', False),
    ({"type": "object", "properties": {}}, "{}", True),
    ({"type": "object", "properties": {}}, '{"a":1}', False),
    ({"type": "object"}, '{"a":[1,{"b":null}],"a":2}', True),
    (SCHEMAS["prefix-then-items"], '["head",1,2,3]', True),
    (SCHEMAS["prefix-then-items"], '["head"]', False),
    (SCHEMAS["prefix-then-items"], '["head",1,2,3,4]', False),
    (SCHEMAS["prefix-items"], '["abc"]', True),
    (SCHEMAS["prefix-items"], '["abc",true,1]', False),
    (SCHEMAS["prefix-items"], "[]", False),
]


@pytest.mark.parametrize("schema,text,expected", ACCEPTS, ids=[f"{i}-{t[:24]}" for i, (_, t, _) in enumerate(ACCEPTS)])
def test_accepts_exactly(sampler, schema, text, expected):
    assert sampler.allows(json_schema_grammar(schema), byte_tokens(text)) is expected
    if expected:
        validate(json.loads(text), schema)


bounds = st.none() | st.integers(-10**7, 10**7)


@PROPERTY_SETTINGS
@given(lo=bounds, hi=bounds, n=st.integers(-10**7, 10**7) | st.integers(-30, 30))
def test_integer_bounds_are_exact(sampler, lo, hi, n):
    if lo is not None and hi is not None and lo > hi:
        lo, hi = hi, lo
    schema = {"type": "integer"} | ({"minimum": lo} if lo is not None else {}) | (
        {"maximum": hi} if hi is not None else {})
    inside = (lo is None or lo <= n) and (hi is None or n <= hi)
    assert sampler.allows(json_schema_grammar(schema), byte_tokens(str(n))) is inside


@PROPERTY_SETTINGS
@given(lo=st.floats(-1000, 1000), hi=st.floats(-1000, 1000), exclusive=st.booleans(),
       x=st.floats(-2000, 2000) | st.integers(-2000, 2000))
def test_number_bounds_are_sound(sampler, lo, hi, exclusive, x):
    lo, hi = min(lo, hi), max(lo, hi)
    schema = {"type": "number", "exclusiveMinimum" if exclusive else "minimum": lo, "maximum": hi}
    try:
        grammar = json_schema_grammar(schema)
    except SchemaError:
        assert math.ceil(lo) > math.floor(hi) or exclusive  # no integer between the bounds
        return
    if sampler.allows(grammar, byte_tokens(json.dumps(x))):
        validate(x, schema)


PATTERNS = [r"^\d{2,3}(-[a-c]+)?$", r"^[^a-z\s]{1,4}$", r"x|y", r"^(ab|cd)*e?$", r"^\w+@\w+\.(com|org)$"]


@PROPERTY_SETTINGS
@given(data=st.data(), pattern=st.sampled_from(PATTERNS))
def test_patterns_match_python_re(sampler, data, pattern):
    grammar = json_schema_grammar({"type": "string", "pattern": pattern})
    text = data.draw(st.from_regex(pattern, fullmatch=True) | st.text(max_size=6))
    if "\x00" in text:
        return
    # JSON Schema patterns are ECMA-262 regexes: \\d and \\w are ASCII, \\s is Unicode space
    ecma = pattern.replace("\\s", "\t\n\x0b\x0c\r \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff")
    expected = re.search(ecma, text, re.ASCII) is not None
    assert sampler.allows(grammar, byte_tokens(json.dumps(text, ensure_ascii=False))) is expected


def test_overlong_utf8_gets_through(sampler):
    # A known limit of llama.cpp's grammar sampler, recorded here: E0 9F BF (an overlong
    # U+07FF) passes a string grammar; the engine's errors="replace" decoding turns it into
    # U+FFFD characters, so the JSON still parses.
    grammar = json_schema_grammar({"type": "string", "maxLength": 3})
    quote = IDS['"']
    assert sampler.allows(grammar, [quote, _BYTE + 0xE0, _BYTE + 0x9F, _BYTE + 0xBF, quote])
    assert json.loads(b'"\xe0\x9f\xbf"'.decode("utf-8", "replace")) == "\ufffd" * 3
    # What positive classes do keep out: no code point above U+10FFFF, no UTF-8 surrogates.
    assert not sampler.allows(grammar, [quote, _BYTE + 0xF4, _BYTE + 0x90, _BYTE + 0x80, _BYTE + 0x80, quote])
    assert not sampler.allows(grammar, [quote, _BYTE + 0xED, _BYTE + 0xA0, _BYTE + 0x80, quote])
    assert not sampler.allows(grammar, [quote, _BYTE + 0xFA, _BYTE + 0x80, _BYTE + 0x80, _BYTE + 0x80, quote])
    assert sampler.allows(grammar, [quote, _BYTE + 0xC3, _BYTE + 0xA9, quote])  # é
    assert not sampler.allows(grammar, [quote, _BYTE + 0x0A, quote])  # a raw newline


def test_strings_escape_control_characters(sampler):
    # Push towards raw control characters and backslashes: only escapes may come out.
    bias = {BYTE_TOKEN_OFFSET + b: 30.0 for b in (0x01, 0x0A, 0x1F, 0x5C)}
    grammar = json_schema_grammar({"type": "string", "maxLength": 20})
    for seed in SEEDS:
        out = sampler.generate(grammar, seed=seed, temperature=1.0, bias=bias)
        assert out.finished and not re.search(r"[\x00-\x1f]", out.text), repr(out.text)
        value = json.loads(out.text)
        assert isinstance(value, str) and len(value) <= 20
        value.encode("utf-8")  # no lone surrogates from \ud800-style escapes


# --- hypothesis: const, enum, literal round trips ----------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**9, 10**9)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)


@PROPERTY_SETTINGS
@given(value=json_values)
def test_const_round_trips(sampler, value):
    out = sampler.generate(json_schema_grammar({"const": value}), max_tokens=600)
    assert out.finished
    assert _same(json.loads(out.text), value)


@PROPERTY_SETTINGS
@given(values=st.lists(json_values, min_size=1, max_size=4, unique_by=lambda v: json.dumps(v, sort_keys=True)),
       seed=st.integers(0, 1000))
def test_enum_picks_a_member(sampler, values, seed):
    out = sampler.generate(json_schema_grammar({"enum": values}), seed=seed, temperature=1.0, max_tokens=600)
    assert out.finished
    assert any(_same(json.loads(out.text), v) for v in values)


@PROPERTY_SETTINGS
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=24),
       seed=st.integers(0, 1000))
def test_literal_round_trips(sampler, text, seed):
    grammar = GrammarBuilder().build(GrammarBuilder().literal(text))
    out = sampler.generate(grammar, seed=seed, temperature=1.0, max_tokens=200)
    assert out.finished and out.text == text


def test_literal_escaping():
    b = GrammarBuilder()
    assert b.literal('a"b\\c\nd\te\r\x01é') == '"a\\"b\\\\c\\nd\\te\\r\\x01é"'
    with pytest.raises(ValueError):
        b.literal("nul\x00")


def test_builder_rules_and_primitives(sampler):
    b = GrammarBuilder()
    first = b.add_rule("my_rule", '"x"')
    assert first == "my-rule" and b.add_rule("my_rule", '"x"') == "my-rule"
    assert b.add_rule("my_rule", '"y"') == "my-rule-2"
    assert b.add_rule("ws", '"z"') != "ws" and b.add_rule("root", '"z"') != "root"
    value = b.add_schema({"type": "array", "items": {"type": "integer"}}, "things")
    grammar = b.build(f"{first} {value}")
    assert grammar.startswith(f"root ::= {first} {value}\n")
    names = [line.split(" ::= ")[0] for line in grammar.splitlines()]
    assert len(names) == len(set(names)) and "ws" in names and "string" not in names
    assert sampler.accepts(grammar)
    out = sampler.generate(grammar, temperature=1.0, max_tokens=400)
    assert out.text.startswith("x") and isinstance(json.loads(out.text[1:]), list)


# --- tool calls ------------------------------------------------------------------------------------

WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12},
    "unit": {"enum": ["c", "f"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 7}}, "required": ["city"]}
FLAGS = {"type": "object", "properties": {
    "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3},
    "note": {"type": ["string", "null"], "maxLength": 6}}, "required": ["flags", "note"]}
TOOLS = [
    {"name": "get_weather", "description": "Weather for a city", "parameters": WEATHER},
    {"name": "ping", "description": "No parameters at all"},
    {"name": "set_flags", "parameters": FLAGS},
]
SCHEMA_OF = {"get_weather": WEATHER, "ping": {"type": "object", "properties": {}}, "set_flags": FLAGS}
DS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
      "<｜tool▁calls▁end｜>")


class _Scan:
    """A cursor over generated text for the checkers below."""

    def __init__(self, text: str) -> None:
        self.text, self.pos = text, 0

    def lit(self, s: str) -> None:
        assert self.text.startswith(s, self.pos), f"expected {s!r} at {self.text[self.pos:]!r}"
        self.pos += len(s)

    def maybe(self, s: str) -> bool:
        if self.text.startswith(s, self.pos):
            self.pos += len(s)
            return True
        return False

    def json(self):
        value, self.pos = json.JSONDecoder().raw_decode(self.text, self.pos)
        return value

    def until(self, s: str) -> str:
        end = self.text.index(s, self.pos)
        value, self.pos = self.text[self.pos:end], end + len(s)
        return value

    def done(self) -> bool:
        return self.pos == len(self.text)


def _call_object(cur: _Scan, key: str) -> tuple[str, dict]:
    obj = cur.json()
    assert list(obj) == ["name", key], obj
    return obj["name"], obj[key]


def _calls_hermes(cur):
    calls = []
    while True:
        cur.lit("<tool_call>\n")
        calls.append(_call_object(cur, "arguments"))
        cur.lit("\n</tool_call>")
        if cur.done():
            return calls
        cur.lit("\n")


def _calls_qwen3_coder(cur):
    calls = []
    while True:
        cur.lit("<tool_call>\n<function=")
        name, args = cur.until(">\n"), {}
        while cur.maybe("<parameter="):
            key = cur.until(">\n")
            raw = cur.until("\n</parameter>\n")
            args[key] = raw if SCHEMA_OF[name]["properties"][key].get("type") == "string" else json.loads(raw)
        cur.lit("</function>\n</tool_call>")
        calls.append((name, args))
        if cur.done():
            return calls
        cur.lit("\n")


def _calls_llama3(cur):
    calls = [_call_object(cur, "parameters")]
    while cur.maybe("; "):
        calls.append(_call_object(cur, "parameters"))
    return calls


def _calls_mistral(cur):
    cur.lit("[TOOL_CALLS]")
    calls = cur.json()
    assert isinstance(calls, list) and calls and cur.text[cur.pos - 1] == "]"
    assert all(list(c) == ["name", "arguments"] for c in calls), calls
    return [(c["name"], c["arguments"]) for c in calls]


def _calls_deepseek(cur):
    cur.lit(DS[0])
    calls = []
    while True:
        cur.lit(DS[1] + "function" + DS[2])
        name = cur.until("\n```json\n")
        calls.append((name, cur.json()))
        cur.lit("\n```" + DS[3])
        if cur.maybe(DS[4]):
            return calls
        cur.lit("\n")


def _calls_harmony(cur):
    cur.lit("<|channel|>commentary to=functions.")
    name = cur.until(" <|constrain|>json<|message|>")
    args = cur.json()
    cur.lit("<|call|>")
    return [(name, args)]


def _calls_json(cur):
    obj = cur.json()
    assert list(obj) == ["tool_calls"] and obj["tool_calls"], obj
    assert all(list(c) == ["name", "arguments"] for c in obj["tool_calls"]), obj
    return [(c["name"], c["arguments"]) for c in obj["tool_calls"]]


CHECKERS = {name: globals()[f"_calls_{name}"] for name in TOOL_CALL_SYNTAXES}


def parse_calls(syntax: str, text: str) -> list[tuple[str, dict]]:
    cur = _Scan(text)
    calls = CHECKERS[syntax](cur)
    assert cur.done(), f"trailing text {text[cur.pos:]!r}"
    return calls


def _unquote_union_strings(syntax: str, name: str, args: dict) -> dict:
    """qwen3_coder writes the value of a parameter that is not typed "string" as JSON, so a
    string in a ["string", "null"] parameter comes quoted. vLLM's Qwen3-Coder parser decodes
    such a value; localserve.parsing.tools (so far) keeps it as the raw text, quotes included. Accept
    both here: the difference is the parser's to settle, and the report says so."""
    if syntax != "qwen3_coder":
        return args
    out = dict(args)
    for key, value in args.items():
        if SCHEMA_OF[name]["properties"][key].get("type") != "string" and isinstance(value, str):
            try:
                decoded = json.loads(value)
            except ValueError:
                continue
            out[key] = decoded if isinstance(decoded, str) else value
    return out


# Bias towards the marker tokens some of the time, so both ways of writing a marker (the
# special token, or its characters) are exercised.
MARKER_BIAS = {IDS[t]: 15.0 for t in SPECIALS if t != "<|call|>"}
# With parallel calls a greedy random model may go on calling for ever; once the grammar is
# complete the end-of-generation token is allowed, and this makes it likelier.
END_BIAS = {EOS_ID: 8.0}


@pytest.mark.parametrize("syntax", TOOL_CALL_SYNTAXES)
@pytest.mark.parametrize("parallel", [False, True])
@pytest.mark.parametrize("forced", [None, "get_weather"])
def test_tool_call_grammar(sampler, syntax, parallel, forced):
    grammar = tool_call_grammar(syntax, TOOLS, parallel=parallel, forced_name=forced)
    assert sampler.accepts(grammar), grammar
    seen = set()
    end = END_BIAS if parallel else {}
    for seed in SEEDS:
        for temperature, bias in ((0.0, end), (1.0, end), (1.0, MARKER_BIAS | end)):
            out = sampler.generate(grammar, seed=seed, temperature=temperature, bias=bias, max_tokens=600)
            assert out.finished, out.text
            calls = parse_calls(syntax, out.text)
            if not parallel or syntax == "harmony":
                assert len(calls) == 1, out.text
            for name, args in calls:
                assert name == forced if forced else name in SCHEMA_OF, out.text
                validate(args, SCHEMA_OF[name])
                seen.add(name)
            # the projector reads back what the grammar forced, as the grammar's own reader does
            schemas = {t["name"]: t.get("parameters") or {} for t in TOOLS}
            content, parsed = parse_generated_tools(out.text, syntax, schemas, parallel=parallel)
            assert content.strip() == "", (out.text, content)
            assert [(c.name, _unquote_union_strings(syntax, c.name, json.loads(c.arguments)))
                    for c in parsed] == calls, out.text
            if IDS["<tool_call>"] in (bias or {}):
                assert any(t in out.tokens for t in MARKER_BIAS) or syntax in ("llama3", "json"), out.tokens
    for seed in range(100, 140):  # the grammar really offers every function
        if forced is not None or len(seen) == len(TOOLS):
            break
        out = sampler.generate(grammar, seed=seed, temperature=1.5, bias=end, max_tokens=600)
        seen.update(name for name, _ in parse_calls(syntax, out.text))
    assert seen == ({forced} if forced else set(SCHEMA_OF))


def test_tool_call_prefix_and_special_tokens(sampler):
    grammar = tool_call_grammar("hermes", TOOLS, parallel=False, forced_name="ping", prefix="Sure. ")
    out = sampler.generate(grammar, bias={IDS["<tool_call>"]: 30.0, IDS["</tool_call>"]: 30.0})
    assert out.text.startswith("Sure. <tool_call>\n")
    assert parse_calls("hermes", out.text[len("Sure. "):]) == [("ping", {})]
    # A plain string literal is satisfied by the special token whose text it is...
    assert IDS["<tool_call>"] in out.tokens and IDS["</tool_call>"] in out.tokens
    # ...or by the same characters when the model prefers those.
    out = sampler.generate(grammar, bias={IDS["<tool_call>"]: -1e9, IDS["<"]: 30.0})
    assert IDS["<tool_call>"] not in out.tokens and "<tool_call>" in out.text


def test_harmony_call_marker_is_spelled_out(sampler):
    # <|call|> is an end-of-generation token, and llama.cpp masks EOG tokens until the
    # grammar is complete: the literal can only be written in characters, then EOG follows.
    grammar = tool_call_grammar("harmony", TOOLS, parallel=False, forced_name="ping")
    out = sampler.generate(grammar, bias={IDS["<|call|>"]: 30.0})
    assert out.finished and out.text.endswith("<|call|>") and IDS["<|call|>"] not in out.tokens


def test_qwen3_coder_string_values_are_raw(sampler):
    tools = [{"name": "echo", "parameters": {"type": "object", "properties": {
        "text": {"type": "string", "minLength": 1, "maxLength": 10},
        "code": {"type": "string", "pattern": "^[A-Z]{2}[0-9]$"},
        "kind": {"type": "string", "enum": ["x<y", "plain"]},
        "n": {"type": "integer", "minimum": 0}}, "required": ["text", "code", "kind", "n"]}}]
    grammar = tool_call_grammar("qwen3_coder", tools, parallel=False)
    for seed in SEEDS:
        out = sampler.generate(grammar, seed=seed, temperature=1.0)
        m = re.fullmatch(r"<tool_call>\n<function=echo>\n<parameter=text>\n([^<]{1,10})\n</parameter>\n"
                         r"<parameter=code>\n([A-Z]{2}[0-9])\n</parameter>\n<parameter=kind>\n(x<y|plain)\n"
                         r"</parameter>\n<parameter=n>\n(0|[1-9][0-9]*)\n</parameter>\n</function>\n</tool_call>",
                         out.text)
        assert m, out.text


def test_tool_call_grammar_errors():
    with pytest.raises(ValueError):
        tool_call_grammar("nope", TOOLS, parallel=False)
    with pytest.raises(SchemaError, match="missing"):
        tool_call_grammar("hermes", TOOLS, parallel=False, forced_name="missing")
    with pytest.raises(SchemaError):
        tool_call_grammar("hermes", [], parallel=False)
    with pytest.raises(SchemaError, match=r"tools\[0\].parameters.properties.x: unknown type"):
        tool_call_grammar("hermes", [{"name": "f", "parameters": {"properties": {"x": {"type": "nope"}}}}],
                          parallel=False)
    with pytest.raises(SchemaError, match="qwen3_coder"):
        tool_call_grammar("qwen3_coder", [{"name": "f", "parameters": {"type": "array"}}], parallel=False)


# --- every grammar parses; invalid and unsupported schemas -------------------------------------------

def test_every_grammar_parses(sampler):
    grammars = [json_schema_grammar(s) for s in (*SCHEMAS.values(), *OPEN_ENDED.values())]
    grammars += [json_object_grammar()]
    grammars += [tool_call_grammar(syntax, TOOLS, parallel=p, forced_name=f, prefix=x)
                 for syntax in TOOL_CALL_SYNTAXES for p in (False, True)
                 for f in (None, "set_flags") for x in ("", "pre\"fix\n")]
    extra = [
        {"type": "integer", "minimum": 10**20},
        {"type": "integer", "maximum": -10**3, "minimum": -10**18},
        {"type": "number", "minimum": 0.5, "exclusiveMaximum": 100.5},
        {"type": "string", "maxLength": MAX_REPEAT},
        {"type": "string", "pattern": "[^a-c\\d]+[.][\\u00e9-\\u00ff]*(?:x|)$"},
        {"type": "array", "items": {"type": "array", "items": {"type": "array"}}},
        {"type": "object", "properties": {"a": {"$ref": "#/properties/b"}, "b": {"type": "integer"}}},
        {"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"type": "null"}}, "$ref": "#/$defs/a"},
        {"type": "object", "additionalProperties": False, "required": []},
        {"type": "object", "properties": {"a-b_c.d": {"type": "integer"}}, "required": ["a-b_c.d"]},
    ]
    grammars += [json_schema_grammar(s) for s in extra]
    for grammar in grammars:
        assert sampler.accepts(grammar), grammar


BAD_SCHEMAS = [
    ("not a schema", r"schema: a schema must be a JSON object"),
    ({"type": "strnig"}, r"schema: unknown type 'strnig'"),
    ({"type": "object", "properties": {"x": {"type": "strnig"}}}, r"schema\.properties\.x: unknown type 'strnig'"),
    ({"type": "object", "properties": []}, r"properties: must be an object"),
    ({"type": "object", "properties": {"x": 5}}, r"schema\.properties\.x: a schema must be"),
    ({"type": "object", "required": "x"}, r"required: must be a list"),
    ({"$ref": "#/$defs/missing"}, r"points to nothing"),
    ({"$ref": "https://example.com/schema.json"}, r"unsupported \$ref"),
    ({"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}, r"refers back to itself"),
    ({"anyOf": [{"$ref": "#"}, {"type": "null"}]}, r"refers back to itself"),
    ({"type": "string", "pattern": "(?=a)b"}, r"lookaround"),
    ({"type": "string", "pattern": "a\\bc"}, r"escape \\b"),
    ({"type": "string", "pattern": "a^b"}, r"'\^' inside"),
    ({"type": "string", "pattern": "^a|b$"}, r"top-level alternation"),
    ({"type": "string", "pattern": "(ab"}, r"unbalanced"),
    ({"type": "string", "pattern": "^[a-z]+$", "maxLength": 3}, r"pattern together with"),
    ({"type": "string", "maxLength": MAX_REPEAT + 1}, r"repetition counts above"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, r"minLength is above maxLength"),
    ({"type": "string", "maxLength": -1}, r"non-negative integer"),
    ({"not": {"type": "null"}}, r"keyword 'not'"),
    ({"type": "array", "uniqueItems": True}, r"uniqueItems"),
    ({"type": "array", "minItems": 3, "maxItems": 1}, r"minItems is above maxItems"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, r"within minimum/maximum"),
    ({"type": "number", "minimum": 0.1, "maximum": 0.9}, r"within minimum/maximum"),
    ({"type": "number", "multipleOf": 0.5}, r"multipleOf"),
    ({"type": "integer", "minimum": "0"}, r"minimum: must be a finite number"),
    ({"enum": []}, r"enum: must be a non-empty list"),
    ({"type": "string", "enum": [1, 2]}, r"no enum/const value"),
    ({"anyOf": "x"}, r"anyOf: must be a non-empty list"),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, r"no common type"),
    ({"allOf": [{"pattern": "a"}, {"pattern": "b"}]}, r"cannot merge differing 'pattern'"),
    ({"type": "object", "properties": {"a": {}}, "required": ["b"], "additionalProperties": False},
     r"required property 'b' is not allowed"),
    ({"type": "object", "minProperties": 2}, r"minProperties"),
    ({"type": "object", "patternProperties": {"^x": {}}}, r"patternProperties"),
    ({"type": 5}, r"type: must be a type name"),
    ({"enum": [float("nan")]}, r"is not a JSON value"),
]


@pytest.mark.parametrize("schema,message", BAD_SCHEMAS, ids=[m for _, m in BAD_SCHEMAS])
def test_schema_errors(schema, message):
    with pytest.raises(SchemaError, match=message):
        validate_schema(schema)
    with pytest.raises(SchemaError):
        json_schema_grammar(schema)
    assert issubclass(SchemaError, ValueError)


def test_python_call_strings_may_escape_their_quote(sampler):
    """LFM2's forced calls (a format derived from its real template): a string value may hold
    its own quote escaped, as the model writes it, and reads back unescaped."""
    from template_calls import template
    from localserve.models.loaded import detect_chat_family
    family = detect_chat_family(template("LFM2-8B-A1B"))
    tools = [{"name": "echo", "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                                             "required": ["text"]}}]
    grammar = tool_call_grammar(family, tools, parallel=False)
    written = "<|tool_call_start|>[echo(text='it\\'s a \\\\ b')]<|tool_call_end|>"
    assert sampler.allows(grammar, byte_tokens(written))
    assert not sampler.allows(grammar, byte_tokens("<|tool_call_start|>[echo(text='it's')]<|tool_call_end|>"))
    _, [call] = parse_generated_tools(written, family, {"echo": tools[0]["parameters"]})
    assert json.loads(call.arguments) == {"text": "it's a \\ b"}
