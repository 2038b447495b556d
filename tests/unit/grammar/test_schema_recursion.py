"""A schema whose allOf or $ref merge leads back to where it began is a SchemaError (a 400),
never a RecursionError (a 500): found by `make fuzz`."""

import pytest

from localserve.grammar.gbnf import SchemaError
from localserve.grammar.schema import GrammarBuilder


@pytest.mark.parametrize("schema", [
    # the fuzzer's: the root refers to a, whose allOf refers back to the root
    {"$defs": {"a": {"allOf": [{"type": "object", "properties": {}}, {"$ref": "#"}]}}, "$ref": "#/$defs/a"},
    # a $ref beside other keywords that names its own schema
    {"$defs": {"a": {"$ref": "#/$defs/a", "type": "object"}}, "$ref": "#/$defs/a"},
])
def test_a_merge_that_comes_back_to_its_start_is_a_schema_error(schema):
    with pytest.raises(SchemaError):
        GrammarBuilder().add_schema(schema)


def test_an_allof_with_a_ref_still_merges():
    schema = {"$defs": {"base": {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}},
              "allOf": [{"$ref": "#/$defs/base"}, {"properties": {"b": {"type": "integer"}}}]}
    builder = GrammarBuilder()
    grammar = builder.build(builder.add_schema(schema))
    assert '"\\"a\\"" ws ":" ws' in grammar and '"\\"b\\"" ws ":" ws integer' in grammar
