"""Where a strict call's grammar wakes: the text pipeline's open call (its number and text so far),
and the grammar a request's strict tools make (prompt/build.py). Pure: no model."""

from __future__ import annotations

from localserve.generation import GenerationRequest, ToolSpec
from localserve.parsing.reasoning import REASONING_FORMATS
from localserve.parsing.tool_families import TOOL_SYNTAXES
from localserve.conversation import ToolDefinition
from localserve.dialects.anthropic.tools_and_thinking import read_tools as read_anthropic_tools
from localserve.dialects.function_tools import function_definitions
from localserve.dialects.responses.tools import read_tools as read_responses_tools
from localserve.prompt.build import ChatInput, strict_call_grammar
from localserve.runtime.call_wake import grammar_follows, split_call
from localserve.runtime.textstream import OutputPipeline

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def pipeline(syntax="hermes", *, stop=(), reasoning=None, parallel=True) -> OutputPipeline:
    tools = ToolSpec(TOOL_SYNTAXES[syntax], {"get_weather": SCHEMA}, parallel=parallel)
    return OutputPipeline(GenerationRequest(prompt_tokens=[1], stop=list(stop), tools=tools,
                                            reasoning=REASONING_FORMATS[reasoning] if reasoning else None))


def fed(pipe: OutputPipeline, *pieces: str):
    """(number, text) of the open call after feeding the pieces, or None."""
    for piece in pieces:
        pipe.feed(piece.encode())
    opened = pipe.open_call()
    return None if opened is None else (opened.number, opened.text)


def test_no_call_is_open_in_plain_text_or_a_half_marker():
    pipe = pipeline()
    assert fed(pipe, "Sunny ", "in Paris. ") is None
    assert fed(pipe, "<tool_") is None          # held back: it may yet be a marker


def test_a_call_opens_at_its_marker_with_the_text_since():
    pipe = pipeline()
    assert fed(pipe, "Let me look. <tool_call>") == (1, "<tool_call>")
    assert fed(pipe, '\n{"name": "get_we') == (1, '<tool_call>\n{"name": "get_we')


def test_after_a_call_the_next_block_has_the_next_number():
    pipe = pipeline()
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert fed(pipe, call)[0] == 1               # whitespace may follow before the block ends
    assert fed(pipe, " And") is None
    assert fed(pipe, "\n<tool_call>") == (2, "<tool_call>")


def test_no_call_is_open_once_the_calls_are_done():
    pipe = pipeline(parallel=False)
    assert fed(pipe, '<tool_call>{"name": "get_weather", "arguments": {}}</tool_call>') is None
    assert pipe.tools_done


def test_a_bare_object_opens_a_call_only_at_the_message_start():
    assert fed(pipeline("llama3"), '  {"name": "get_weather"') == (1, '{"name": "get_weather"')
    assert fed(pipeline("llama3"), 'Here: {"name": "get_weather"') is None


def test_a_bare_object_opens_a_call_only_once_it_names_a_tool():
    """JSON that answers the user is no call: the grammar sleeps on (llama3 and the generic json)."""
    for syntax, head in (("llama3", ""), ("json", '{"tool_calls": [')):
        pipe = pipeline(syntax)
        assert fed(pipe, head + "{") is None
        assert fed(pipe, '"type": "function", "name": "get_wea') is None
        assert fed(pipe, 'ther"') == (1, head + '{"type": "function", "name": "get_weather"')
        for answer in ('{"answer": 42}', '{"name": "Paris", "population": 2}', '{"name": "get_time"'):
            pipe = pipeline(syntax)
            assert fed(pipe, answer[:1]) is None and fed(pipe, answer[1:]) is None, answer


def test_a_marker_inside_reasoning_opens_nothing():
    pipe = pipeline(reasoning="think")
    fmt = pipe.splitter.fmt
    assert fed(pipe, fmt.start, "maybe <tool_call>") is None
    assert fed(pipe, fmt.end, "<tool_call>") == (1, "<tool_call>")


def test_text_a_stop_string_holds_back_belongs_to_the_call():
    pipe = pipeline(stop=["\n\nUser:"])
    assert fed(pipe, "<tool_call>\n") == (1, "<tool_call>\n")


def test_nothing_wakes_while_a_character_is_cut_in_two():
    pipe = pipeline()
    pipe.feed(b'<tool_call>{"name": "\xc3')
    assert pipe.open_call() is None
    pipe.feed(b"\xa9")
    assert pipe.open_call().text == '<tool_call>{"name": "\u00e9'


def test_strict_tools_are_named_in_every_dialect_shape():
    chat = [{"type": "function", "function": {"name": "a", "parameters": {}, "strict": True}},
            {"type": "function", "function": {"name": "b", "parameters": {}, "strict": False}},
            {"type": "function", "function": {"name": "c", "parameters": {}}}]
    anthropic = [{"name": "d", "input_schema": {}, "strict": True}, {"name": "e", "input_schema": {}}]
    responses = [{"type": "function", "name": "f", "parameters": {}, "strict": True},
                 {"type": "function", "name": "g", "parameters": {}}]
    assert ChatInput([], function_definitions(chat)).strict_tools == {"a"}
    assert ChatInput([], read_anthropic_tools(anthropic)).strict_tools == {"d"}
    assert ChatInput([], read_responses_tools({"tools": responses}).definitions).strict_tools == {"f"}
    assert ChatInput([], function_definitions(None)).strict_tools == frozenset()


def test_only_strict_tools_keep_their_schema_in_the_call_grammar():
    other = {"type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}
    chat = ChatInput(messages=[], tools=[ToolDefinition("get_weather", parameters=SCHEMA, strict=True),
                                         ToolDefinition("get_time", parameters=other)])
    grammar = strict_call_grammar("hermes", chat)
    assert "city" in grammar and "zone" not in grammar      # get_time's arguments: any object
    # one <parameter=KEY> block per argument cannot say "any object": every tool keeps its own
    assert "zone" in strict_call_grammar("qwen3_coder", chat)


PIECES = {1: b"Sure. ", 2: b"<tool_call>", 3: b"\n{", 4: b'"na', 5: b"ok{", 6: b"\xc3"}


def test_a_call_is_read_back_as_the_model_s_own_tokens():
    assert split_call(b'<tool_call>\n{"na', [1, 2, 3, 4], PIECES.get) == (b"", [2, 3, 4])
    assert split_call(b"<tool_call>", [1, 2], PIECES.get) == (b"", [2])


def test_a_call_that_begins_inside_a_token_leads_with_that_token_s_tail():
    assert split_call(b'{"na', [1, 5, 4], PIECES.get) == (b"{", [4])
    assert split_call(b"{", [5], PIECES.get) == (b"{", [])


def test_a_call_the_output_does_not_end_with_is_refused():
    assert split_call("<tool_call>\ufffd".encode(), [2, 6], PIECES.get) is None     # a replaced byte
    assert split_call(b"<tool_call>", [1], PIECES.get) is None


def test_the_marker_that_opened_the_block_is_known():
    pipe = pipeline("llama3")
    pipe.feed("<|python_tag|>".encode())
    assert pipe.open_call().marker == "<|python_tag|>"


def test_a_grammar_may_follow_a_marker_it_does_not_write_only_where_the_parser_agrees():
    assert grammar_follows(TOOL_SYNTAXES["llama3"], "<|python_tag|>")
    assert not grammar_follows(TOOL_SYNTAXES["qwen3_coder"], "<function=")
    assert not grammar_follows(TOOL_SYNTAXES["hermes"], "<tool_call>")     # it writes that one itself
