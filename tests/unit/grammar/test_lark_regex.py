"""Lark grammars of custom tools flattened into one regex (localserve/grammar/lark_regex.py)."""

from __future__ import annotations

import re

import pytest

from localserve.grammar.schema import GrammarBuilder
from localserve.grammar.lark_regex import LarkError, lark_to_regex

# Codex CLI 0.171.0's apply_patch grammar, as it sends it.
APPLY_PATCH = r'''start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?

hunk: add_hunk | delete_hunk | update_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
update_hunk: "*** Update File: " filename LF change_move? change?

filename: /(.+)/
add_line: "+" /(.*)/ LF -> line

change_move: "*** Move to: " filename LF
change: (change_context | change_line)+ eof_line?
change_context: ("@@" | "@@ " /(.+)/) LF
change_line: ("+" | "-" | " ") /(.*)/ LF
eof_line: "*** End of File" LF

%import common.LF
'''


@pytest.mark.parametrize("text,matches", [
    ("*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n", True),
    ("*** Begin Patch\n*** Update File: a.py\n@@ def f\n-x\n+y\n ctx\n*** End of File\n*** End Patch", True),
    ("*** Begin Patch\n*** Delete File: a\n*** Update File: b\n*** Move to: c\n*** End Patch\n", True),
    ("*** Begin Patch\n*** End Patch\n", False),                        # hunk+ needs one
    ("*** Begin Patch\n*** Add File: a.txt\nhi\n*** End Patch\n", False),  # an added line needs '+'
    ("*** Begin patch\n*** Delete File: a\n*** End Patch\n", False),
])
def test_codex_apply_patch_grammar(text, matches):
    assert bool(re.fullmatch(lark_to_regex(APPLY_PATCH), text)) is matches


@pytest.mark.parametrize("grammar,good,bad", [
    ('start: ("a".."c")~2..3 "!"', "ab!", "abcd!"),
    ('start: x [y]\nx: "x"+\ny: WORD\n%import common.WORD', "xxhello", "hello"),
    ('start: n ("," n)*\nn: INT\n%import common.INT', "1,22,333", "1,,2"),
    ('start: "a\\nb" | /[0-9]+/', "a\nb", "a\\nb"),
    ("// a comment\nstart: greeting\n\ngreeting: \"hi\"\n    | \"hello\"", "hello", "hey"),
])
def test_the_lark_subset(grammar, good, bad):
    pattern = lark_to_regex(grammar)
    assert re.fullmatch(pattern, good) and not re.fullmatch(pattern, bad)


@pytest.mark.parametrize("grammar,message", [
    ('start: "(" start ")" | "x"', "recursive"),
    ('start: a\na: "x" b\nb: a', "recursive (a -> b -> a)"),
    ('start: "a"\n%ignore " "', "%ignore"),
    ("start: /a/i", "flags"),
    ('start: "a"i', "case-insensitive"),
    ("start: b", "'b' is used but never defined"),
    ('a: "x"', "no 'start' rule"),
    ("", "empty"),
    ("start: common_thing\n%import common.NOPE", "common.NOPE"),
    ('start: "a"\nstart: "b"', "defined twice"),
])
def test_what_cannot_be_flattened_is_named(grammar, message):
    with pytest.raises(LarkError, match=re.escape(message)):
        lark_to_regex(grammar)


def test_the_flattened_apply_patch_grammar_becomes_gbnf_over_a_json_string():
    builder = GrammarBuilder()
    rule = builder.add_schema({"type": "string", "pattern": f"^(?:{lark_to_regex(APPLY_PATCH)})$"})
    assert "[B] [e] [g] [i] [n]" in builder.build(rule)   # literals go over the JSON string's characters
