"""GBNF grammars for llama.cpp's grammar sampler: JSON Schema → grammar, and forced tool calls.

Whatever a grammar from here lets a model write parses with a strict ``json.loads`` (strings hold
JSON escapes, never raw control characters) and validates against the schema it was built from.
Where that cannot be guaranteed the schema is refused with SchemaError instead. Nothing
surrounds the top-level value.

This module is the public face; the work is done in:
- gbnf: the primitive rules (ws, string, number, …) and how classes and repetitions are written;
- schema: GrammarBuilder, the walk from a JSON schema to rules;
- numbers: minimum/maximum as digit-string ranges;
- regex: ``pattern`` regexes;
- tool_grammars: forced tool calls in each model family's syntax.
"""

from __future__ import annotations

from .gbnf import MAX_REPEAT, WS_MAX_INDENT, SchemaError
from .schema import GrammarBuilder
from .tool_grammars import TOOL_CALL_SYNTAXES, tool_call_grammar

__all__ = [
    "MAX_REPEAT", "TOOL_CALL_SYNTAXES", "WS_MAX_INDENT", "GrammarBuilder", "SchemaError",
    "json_object_grammar", "json_schema_grammar", "tool_call_grammar", "validate_schema",
]


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
