"""The polyfill's pieces on their own: call ids in a template's form, calls and results as text."""

from __future__ import annotations

import re

from localserve.prompt.polyfill import fit_to_template, template_call_id, tools_as_text
from localserve.prompt.probe import TemplateCaps


def test_call_ids_keep_nine_alphanumerics_or_their_random_part_else_a_stable_hash():
    assert template_call_id("aB3dE5gH7") == "aB3dE5gH7"
    assert template_call_id("toolu_aB3dE5gH7") == "aB3dE5gH7"
    assert template_call_id("call_aB3dE5gH7") == "aB3dE5gH7"
    hashed = template_call_id("toolu_01A09q90qw90lq917835lq9")
    assert re.fullmatch(r"[A-Za-z0-9]{9}", hashed) and hashed == template_call_id("toolu_01A09q90qw90lq917835lq9")
    assert hashed != template_call_id("toolu_01A09q90qw90lq917835lq8")


def test_two_ids_with_one_random_part_stay_apart():
    calls = [{"id": i, "type": "function", "function": {"name": "f", "arguments": {}}}
             for i in ("call_aB3dE5gH7", "toolu_aB3dE5gH7")]
    messages, _ = fit_to_template([{"role": "assistant", "content": "", "tool_calls": calls}], None,
                                  TemplateCaps(call_ids="alnum9"))
    ids = [c["id"] for c in messages[0]["tool_calls"]]
    assert ids[0] == "aB3dE5gH7" and ids[1] != ids[0]


def test_what_a_template_cannot_show_becomes_text():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "R"}]
    tools = [{"type": "function", "function": {"name": "f", "description": "D", "parameters": {}}}]
    caps = TemplateCaps(system_role=False, tools=False, tool_calls=False, tool_results=False)
    out, out_tools = fit_to_template(messages, tools, caps)
    assert out_tools is None
    assert [m["role"] for m in out] == ["user", "assistant", "user"]
    assert out[0]["content"].startswith("S\n\n" + tools_as_text(tools)) and out[0]["content"].endswith("U")
    assert out[1]["content"] == '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>'
    assert out[2]["content"] == "<tool_response>\nR\n</tool_response>"


def test_null_or_empty_content_as_the_template_takes_it():
    turn = {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "function": {"name": "f"}}]}
    assert fit_to_template([turn], None, TemplateCaps(empty_content=False))[0][0]["content"] is None
    assert fit_to_template([{**turn, "content": None}], None, TemplateCaps(null_content=False))[0][0]["content"] == ""
