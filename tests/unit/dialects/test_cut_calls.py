"""A tool call cut off by max_tokens, or turned malformed part way, in every dialect: the stream
sends it once, as a call (never its markup as content after it), and the whole answer holds the
same calls and content, as OpenAI answers it: the arguments it got, always the start of a JSON
object (what a client's partial parser reads: the SDKs read streamed arguments with jiter's partial
mode and raise on anything else), and finish_reason "length" (a malformed call: "tool_calls", the
text after it dropped); Responses: the item "incomplete" (the response incomplete for
max_output_tokens when cut); where arguments must be an object (Anthropic's input, Ollama's
arguments) the object they had begun, stop_reason "max_tokens" / done_reason "length" (malformed:
"tool_use" / "stop"). The events are the tool projector's own, from the generated text."""

from __future__ import annotations

import orjson
import jiter
import pytest

from localserve.dialects.anthropic.replies import MessageMeta, MessageStream, final_response as anthropic_final
from localserve.dialects.ollama.replies import Answer, NdjsonLines
from localserve.dialects.openai.chat import ChatChunks, final_response as chat_final
from localserve.dialects.responses.stream import ResponseEvents
from localserve.generation import Chunk, Context, Finished, GenerationOutput
from localserve.parsing.tools import ToolProjector

WHOLE = 'Sure.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'
# (where max_tokens cut the text, the arguments then, the object they had begun)
CUTS = [
    ('"Paris", "da', '{"city":"Paris","da', {"city": "Paris"}),
    ('"Paris", "days": 3', '{"city":"Paris","days":3', {"city": "Paris", "days": 3}),
    ('"Pa', '{"city":"Pa', {}),
    ('{"city', '{"city', {}),
    ('"arguments', "", {}),
]
# (how the arguments turn malformed, the arguments up to there, the object they had begun)
BROKEN = [
    ('{"city": "Paris",, "days": 3}', '{"city":"Paris",', {"city": "Paris"}),
    ('{"city": "Paris" "days": 3}', '{"city":"Paris"', {"city": "Paris"}),
    ('{"city": "Paris", "days": 3 4}', '{"city":"Paris","days":3', {"city": "Paris", "days": 3}),
    ('{"city": "Paris", "days": tru}', '{"city":"Paris","days":tru', {"city": "Paris"}),
    ('{"city": "Pa\\xis"}', '{"city":"Pa\\', {}),           # no such escape
    ('{"city": "Paris", "days": [3,]}', '{"city":"Paris","days":[3,', {"city": "Paris", "days": [3]}),
]
# (the generated text, why generation ended, the arguments, the object they had begun)
CASES = ([(WHOLE[:WHOLE.index(cut) + len(cut)], "length", arguments, closed) for cut, arguments, closed in CUTS]
         + [(WHOLE.replace('{"city": "Paris", "days": 3}', broken) + " and so on", "tool_calls", arguments, closed)
            for broken, arguments, closed in BROKEN])


def generation(text: str, finish: str) -> tuple[list, GenerationOutput]:
    """The events and the answer of a generation of `text`, fed in pieces of three characters as
    a model writes them, and stopped once the projector is done (the runtime stops there)."""
    projector = ToolProjector("hermes", {"get_weather"})
    events = [Context(10, 100)]
    for i in range(0, len(text), 3):
        events += projector.feed(text[i:i + 3])
        if projector.done:
            break
    events += projector.finish()
    content = "".join(e.text for e in events if isinstance(e, Chunk))
    output = GenerationOutput(content=content, tool_calls=projector.calls, finish_reason=finish,
                              prompt_tokens=10, completion_tokens=20)
    return events + [Finished(output)], output


def sse_data(frames: list[bytes]) -> list[dict]:
    return [orjson.loads(line[6:]) for frame in frames for line in frame.split(b"\n") if line.startswith(b"data: {")]


@pytest.mark.parametrize("text,finish,arguments,_", CASES)
def test_chat_completions(text, finish, arguments, _):
    events, output = generation(text, finish)
    shape = ChatChunks({"id": "chatcmpl-1", "model": "m"}, False)
    content, calls, why = "", {}, finish
    finish = None
    for chunk in sse_data([frame for event in events for frame in shape.feed(event)]):
        delta = chunk["choices"][0]["delta"]
        content += delta.get("content") or ""
        for call in delta.get("tool_calls", []):
            calls.setdefault(call["index"], {"name": call["function"].get("name"), "arguments": ""})
            calls[call["index"]]["arguments"] += call["function"]["arguments"]
            if calls[call["index"]]["arguments"]:       # as openai-python's helpers read them
                jiter.from_json(calls[call["index"]]["arguments"].encode(), partial_mode=True)
        finish = chunk["choices"][0]["finish_reason"] or finish
    assert (content, list(calls.values()), finish) == ("Sure.", [{"name": "get_weather", "arguments": arguments}],
                                                       why)
    choice = chat_final([events[-1]], {"id": "chatcmpl-1"}, False)["choices"][0]
    assert choice["finish_reason"] == why and choice["message"]["content"] == "Sure."
    assert [c["function"] for c in choice["message"]["tool_calls"]] == list(calls.values())


STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use"}
DONE_REASONS = {"length": "length", "tool_calls": "stop"}


@pytest.mark.parametrize("text,finish,_,closed", CASES)
def test_anthropic_messages(text, finish, _, closed):
    events, output = generation(text, finish)
    meta = MessageMeta("msg_1", "m", b"k" * 32)
    shape = MessageStream(meta, 10)
    blocks, partial_json, stop = [], {}, None
    for data in sse_data([frame for event in events for frame in shape.feed(event)]):
        if data["type"] == "content_block_start":
            blocks.append(dict(data["content_block"]))
        elif data["type"] == "content_block_delta" and data["delta"]["type"] == "text_delta":
            blocks[data["index"]]["text"] += data["delta"]["text"]
        elif data["type"] == "content_block_delta" and data["delta"]["type"] == "input_json_delta":
            partial_json[data["index"]] = partial_json.get(data["index"], "") + data["delta"]["partial_json"]
            jiter.from_json(partial_json[data["index"]].encode(), partial_mode=True)     # as the SDK reads each
        elif data["type"] == "message_delta":
            stop = data["delta"]["stop_reason"]
    for index, text in partial_json.items():       # as the SDK reads a tool input that streams
        blocks[index]["input"] = jiter.from_json(text.encode(), partial_mode=True)
    assert stop == STOP_REASONS[finish] and [b["type"] for b in blocks] == ["text", "tool_use"]
    assert blocks[0]["text"] == "Sure." and blocks[1]["input"] == closed
    message = anthropic_final(output, meta)
    assert message["stop_reason"] == stop and message["content"] == blocks


@pytest.mark.parametrize("text,finish,_,closed", CASES)
@pytest.mark.parametrize("chat", [True, False])
def test_ollama(text, finish, _, closed, chat):
    events, output = generation(text, finish)
    answer = Answer("m:latest", chat=chat)
    shape = NdjsonLines(answer)
    lines = [orjson.loads(line) for event in events for line in shape.feed(event)]
    part = (lambda line: line["message"]) if chat else (lambda line: line)
    streamed = "".join(part(line)["content" if chat else "response"] for line in lines)
    calls = [call for line in lines for call in part(line).get("tool_calls", [])]
    assert streamed == "Sure." and [c["function"]["arguments"] for c in calls] == [closed]
    assert lines[-1]["done_reason"] == DONE_REASONS[finish]
    whole = answer.whole(output)
    assert part(whole)["tool_calls"] == calls and whole["done_reason"] == DONE_REASONS[finish]


@pytest.mark.parametrize("text,finish,arguments,_", CASES)
def test_responses(text, finish, arguments, _):
    events, output = generation(text, finish)
    shaper = ResponseEvents({"status": "in_progress"})
    streamed = [e for event in events[:-1] for e in shaper.feed(event)] + shaper.finish(output)
    done_items = [e["item"] for e in streamed if e["type"] == "response.output_item.done"]
    deltas = ""
    for e in streamed:
        if e["type"] == "response.function_call_arguments.delta":
            deltas += e["delta"]
            jiter.from_json(deltas.encode(), partial_mode=True)
    assert [i["type"] for i in done_items] == ["message", "function_call"]
    assert done_items[0]["content"][0]["text"] == "Sure." and done_items[0]["status"] == "completed"
    call = done_items[1]
    assert (call["name"], call["arguments"], call["status"]) == ("get_weather", arguments, "incomplete")
    assert deltas == arguments
    last = streamed[-1]
    if finish == "length":
        assert last["type"] == "response.incomplete"
        assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
    else:
        assert last["type"] == "response.completed"
    assert last["response"]["output"] == done_items
    assert [e["sequence_number"] for e in streamed] == list(range(len(streamed)))


def test_a_responses_call_cut_by_a_stop_is_incomplete_in_a_completed_response():
    projector = ToolProjector("hermes", {"get_weather"})
    events = projector.feed(WHOLE[:WHOLE.index('"Paris"')]) + projector.finish()
    shaper = ResponseEvents({"status": "in_progress"})
    for event in events:
        shaper.feed(event)
    shaper.finish(GenerationOutput(content="Sure.", tool_calls=projector.calls, finish_reason="tool_calls"))
    assert shaper.response["status"] == "completed"
    assert [(i["type"], i["status"]) for i in shaper.response["output"]] == [
        ("message", "completed"), ("function_call", "incomplete")]
