"""Tool-call arguments stream as they are generated, for every tool family, in every dialect.

The families are parsing/tool_families.TOOL_SYNTAXES itself, so a family added there is
tested here the day it is added (on the test template it is recognised from, else on the
ChatML one with --tool-syntax: family_servers.FamilyServers.for_syntax). Each forced call
({"city", "days", "unit"}: some twenty tokens of arguments) must reach the client in two
fragments at least, equal in the end to the whole answer's arguments: a parser that held the
arguments back and sent them whole at the call's end would send one.
"""

from __future__ import annotations

import json

import pytest

from clients import anthropic_sdk, openai_sdk
from conftest import ServerProcess
from family_servers import MESSAGES, TOOL_FAMILIES, TOOLS, FamilyServers, check_weather_arguments

FORCED = "get_weather"


@pytest.fixture(scope="module")
def families(models_dir):
    servers = FamilyServers(models_dir)
    yield servers
    servers.stop()


def chat_fragments(srv: ServerProcess) -> None:
    chat = openai_sdk(srv, api_key="x")
    kwargs = dict(model="m", messages=MESSAGES, tools=TOOLS, temperature=0, max_tokens=1000,
                  tool_choice={"type": "function", "function": {"name": FORCED}})
    whole = chat.chat.completions.create(**kwargs).choices[0].message.tool_calls[0]
    check_weather_arguments(whole.function.arguments)
    deltas = [delta for chunk in chat.chat.completions.create(**kwargs, stream=True) if chunk.choices
              for delta in chunk.choices[0].delta.tool_calls or []]
    fragments = [d.function.arguments for d in deltas if d.function.arguments]
    assert len(fragments) >= 2, fragments
    assert "".join(fragments) == whole.function.arguments
    assert [d.id for d in deltas if d.id] == [deltas[0].id]  # one start, with the call's one id
    assert deltas[0].function.name == FORCED


def messages_fragments(srv: ServerProcess) -> None:
    claude = anthropic_sdk(srv)
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in TOOLS]
    kwargs = dict(model="m", max_tokens=1000, messages=MESSAGES, tools=tools, extra_body={"temperature": 0},
                  tool_choice={"type": "tool", "name": FORCED})
    use = next(b for b in claude.messages.create(**kwargs).content if b.type == "tool_use")
    fragments, starts = [], []
    for event in claude.messages.create(**kwargs, stream=True):
        if event.type == "content_block_start" and event.content_block.type == "tool_use":
            starts.append(event.content_block)
        elif event.type == "content_block_delta" and event.delta.type == "input_json_delta":
            fragments.append(event.delta.partial_json)
    assert [b.name for b in starts] == [FORCED] and starts[0].input == {}
    fragments = [f for f in fragments if f]
    assert len(fragments) >= 2, fragments
    assert json.loads("".join(fragments)) == use.input


def responses_fragments(srv: ServerProcess) -> None:
    client = openai_sdk(srv, api_key="x")
    kwargs = dict(model="m", input=MESSAGES[0]["content"], store=False, temperature=0,
                  tools=[{"type": "function", "name": t["function"]["name"], "parameters": t["function"]["parameters"],
                          "strict": False} for t in TOOLS],
                  tool_choice={"type": "function", "name": FORCED})
    item = next(o for o in client.responses.create(**kwargs).output if o.type == "function_call")
    fragments, done = [], None
    for event in client.responses.create(**kwargs, stream=True):
        if event.type == "response.function_call_arguments.delta":
            fragments.append(event.delta)
        elif event.type == "response.output_item.done" and event.item.type == "function_call":
            done = event.item
    assert len(fragments) >= 2, fragments
    assert "".join(fragments) == item.arguments == done.arguments
    check_weather_arguments(item.arguments)


DIALECTS = {"chat": chat_fragments, "messages": messages_fragments, "responses": responses_fragments}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("syntax", TOOL_FAMILIES)
def test_arguments_stream_as_generated_for_every_family_in_every_dialect(families, syntax, dialect):
    DIALECTS[dialect](families.for_syntax(syntax))
