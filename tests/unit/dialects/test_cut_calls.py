"""A tool call cut off by max_tokens, in every dialect: the stream sends it once, as a call (never
its markup as content after it), and the whole answer holds the same calls and content, as
OpenAI answers it: the arguments it got and finish_reason "length" (Responses: the item
"incomplete", the response incomplete for max_output_tokens); where arguments must be an object
(Anthropic's input, Ollama's arguments) the object they had begun, stop_reason "max_tokens" /
done_reason "length". The events are the tool projector's own, from the cut text."""

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


def generation(cut_after: str) -> tuple[list, GenerationOutput]:
    """The events and the answer of a generation cut where `cut_after` ends in WHOLE, fed in
    pieces of three characters as a model writes them."""
    text = WHOLE[:WHOLE.index(cut_after) + len(cut_after)]
    projector = ToolProjector("hermes", {"get_weather"})
    events = [Context(10, 100)]
    for i in range(0, len(text), 3):
        events += projector.feed(text[i:i + 3])
    events += projector.finish()
    content = "".join(e.text for e in events if isinstance(e, Chunk))
    output = GenerationOutput(content=content, tool_calls=projector.calls, finish_reason="length",
                              prompt_tokens=10, completion_tokens=20)
    return events + [Finished(output)], output


def sse_data(frames: list[bytes]) -> list[dict]:
    return [orjson.loads(line[6:]) for frame in frames for line in frame.split(b"\n") if line.startswith(b"data: {")]


@pytest.mark.parametrize("cut_after,arguments,_", CUTS)
def test_chat_completions(cut_after, arguments, _):
    events, output = generation(cut_after)
    shape = ChatChunks({"id": "chatcmpl-1", "model": "m"}, False)
    content, calls, finish = "", {}, None
    for chunk in sse_data([frame for event in events for frame in shape.feed(event)]):
        delta = chunk["choices"][0]["delta"]
        content += delta.get("content") or ""
        for call in delta.get("tool_calls", []):
            calls.setdefault(call["index"], {"name": call["function"].get("name"), "arguments": ""})
            calls[call["index"]]["arguments"] += call["function"]["arguments"]
        finish = chunk["choices"][0]["finish_reason"] or finish
    assert (content, list(calls.values()), finish) == ("Sure.", [{"name": "get_weather", "arguments": arguments}],
                                                       "length")
    choice = chat_final([events[-1]], {"id": "chatcmpl-1"}, False)["choices"][0]
    assert choice["finish_reason"] == "length" and choice["message"]["content"] == "Sure."
    assert [c["function"] for c in choice["message"]["tool_calls"]] == list(calls.values())


@pytest.mark.parametrize("cut_after,_,closed", CUTS)
def test_anthropic_messages(cut_after, _, closed):
    events, output = generation(cut_after)
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
        elif data["type"] == "message_delta":
            stop = data["delta"]["stop_reason"]
    for index, text in partial_json.items():       # as the SDK reads a tool input that streams
        blocks[index]["input"] = jiter.from_json(text.encode(), partial_mode=True)
    assert stop == "max_tokens" and [b["type"] for b in blocks] == ["text", "tool_use"]
    assert blocks[0]["text"] == "Sure." and blocks[1]["input"] == closed
    message = anthropic_final(output, meta)
    assert message["stop_reason"] == "max_tokens" and message["content"] == blocks


@pytest.mark.parametrize("cut_after,_,closed", CUTS)
@pytest.mark.parametrize("chat", [True, False])
def test_ollama(cut_after, _, closed, chat):
    events, output = generation(cut_after)
    answer = Answer("m:latest", chat=chat)
    shape = NdjsonLines(answer)
    lines = [orjson.loads(line) for event in events for line in shape.feed(event)]
    part = (lambda line: line["message"]) if chat else (lambda line: line)
    streamed = "".join(part(line)["content" if chat else "response"] for line in lines)
    calls = [call for line in lines for call in part(line).get("tool_calls", [])]
    assert streamed == "Sure." and [c["function"]["arguments"] for c in calls] == [closed]
    assert lines[-1]["done_reason"] == "length"
    whole = answer.whole(output)
    assert part(whole)["tool_calls"] == calls and whole["done_reason"] == "length"


@pytest.mark.parametrize("cut_after,arguments,_", CUTS)
def test_responses(cut_after, arguments, _):
    events, output = generation(cut_after)
    shaper = ResponseEvents({"status": "in_progress"})
    streamed = [e for event in events[:-1] for e in shaper.feed(event)] + shaper.finish(output)
    done_items = [e["item"] for e in streamed if e["type"] == "response.output_item.done"]
    deltas = "".join(e["delta"] for e in streamed if e["type"] == "response.function_call_arguments.delta")
    assert [i["type"] for i in done_items] == ["message", "function_call"]
    assert done_items[0]["content"][0]["text"] == "Sure." and done_items[0]["status"] == "completed"
    call = done_items[1]
    assert (call["name"], call["arguments"], call["status"]) == ("get_weather", arguments, "incomplete")
    assert deltas == arguments
    last = streamed[-1]
    assert last["type"] == "response.incomplete"
    assert last["response"]["incomplete_details"] == {"reason": "max_output_tokens"}
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
