"""Ollama's NDJSON stream shape through the one pump (a real ResponseWriter over a socket pair):
one object per line, nothing for a keepalive, the call whole in one line, an error as a line."""

from __future__ import annotations

import json
import socket

from localserve.dialects.exchange import Exchange
from localserve.dialects.ollama.errors import OLLAMA_ERRORS
from localserve.dialects.ollama.replies import Answer, NdjsonLines
from localserve.dialects.pump import KEEPALIVE, pump
from localserve.generation import (Chunk, Context, Finished, GenerationFailure, GenerationOutput, Timings, ToolCall,
                                   ToolCallDelta, ToolCallStart)
from localserve.wire.response_writer import ResponseWriter
from localserve.wire.http import Request

CALL = ToolCall("call_1", "get_weather", '{"city":"Paris"}')
DONE = Finished(output=GenerationOutput(content="Hi", prompt_tokens=5, completion_tokens=2, tool_calls=[CALL],
                                        finish_reason="tool_calls", timings=Timings(prefill_ms=1.5, decode_ms=2.25)))


def run(events, chat: bool = True) -> tuple[str, list[dict]]:
    ours, theirs = socket.socketpair()
    req = Request("POST", "/api/chat", "/api/chat", {}, "HTTP/1.1", [("host", "x")], b"{}")
    pump(Exchange(req, ResponseWriter(ours, req), {}, OLLAMA_ERRORS), NdjsonLines(Answer("m:latest", chat=chat)), events)
    theirs.settimeout(2)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        data += theirs.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    body = b""
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        if int(size_line, 16) == 0:
            break
        body += rest[:int(size_line, 16)]
        rest = rest[int(size_line, 16) + 2:]
    assert body.endswith(b"\n") and b"\n\n" not in body and not body.startswith(b":")
    return head.decode(), [json.loads(line) for line in body[:-1].split(b"\n")]


def test_chat_lines_and_the_last_one():
    head, lines = run([KEEPALIVE, Context(3, 64), Chunk(True, "hm"), Chunk(False, "Hi"),
                       ToolCallStart(0, "call_1", "get_weather"), ToolCallDelta(0, '{"city":'), DONE])
    assert "Content-Type: application/x-ndjson" in head
    assert [line["message"] for line in lines[:2]] == [{"role": "assistant", "content": "", "thinking": "hm"},
                                                       {"role": "assistant", "content": "Hi"}]
    assert lines[2]["message"]["tool_calls"] == [
        {"id": "call_1", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}]
    last = lines[3]
    assert last["done"] is True and last["done_reason"] == "stop" and last["message"]["content"] == ""
    assert (last["prompt_eval_count"], last["eval_count"]) == (5, 2)
    assert (last["prompt_eval_duration"], last["eval_duration"]) == (1_500_000, 2_250_000)
    assert all(type(last[k]) is int for k in ("total_duration", "load_duration"))
    assert all(line["model"] == "m:latest" and line["created_at"].endswith("Z") for line in lines)
    assert [line["done"] for line in lines] == [False, False, False, True]


def test_each_call_goes_out_as_soon_as_it_is_whole():
    """Ollama (0.8 on) streams each call as it completes: the first before the second begins."""
    second = ToolCall("call_2", "get_time", '{"zone":"UTC"}')
    done = Finished(output=GenerationOutput(tool_calls=[CALL, second], finish_reason="tool_calls", completion_tokens=9))
    _, lines = run([ToolCallStart(0, "call_1", "get_weather"), ToolCallDelta(0, '{"city":'), Chunk(False, ""),
                    ToolCallDelta(0, ' "Paris"}'), Chunk(False, "x"),
                    ToolCallStart(1, "call_2", "get_time"), ToolCallDelta(1, '{"zone": {"a": 1}'), done])
    calls = [(i, line["message"]["tool_calls"]) for i, line in enumerate(lines) if "tool_calls" in line["message"]]
    assert calls == [
        (1, [{"id": "call_1", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}]),
        # its fragments never closed the object: the answer's own arguments, at the end
        (3, [{"id": "call_2", "function": {"index": 1, "name": "get_time", "arguments": {"zone": "UTC"}}}])]
    assert lines[2]["message"]["content"] == "x" and [line["done"] for line in lines] == [False] * 4 + [True]


def test_generate_lines_carry_response_and_an_empty_context():
    length = Finished(output=GenerationOutput(content="ab", completion_tokens=2, finish_reason="length"))
    _, lines = run([Chunk(False, "a"), Chunk(False, "b"), length], chat=False)
    assert [line["response"] for line in lines] == ["a", "b", ""]
    assert lines[-1]["done_reason"] == "length" and lines[-1]["context"] == []
    assert "message" not in lines[-1]


def test_an_error_after_the_head_is_one_error_line():
    failed = Finished(error=GenerationFailure("the engine failed to decode (status -1)"))
    _, lines = run([Chunk(False, "Hi"), failed])
    assert lines[-1] == {"error": "the engine failed to decode (status -1)"}


def test_a_whole_answer():
    reply = Answer("m", chat=True)
    whole = reply.whole(DONE.output)
    assert whole["message"] == {"role": "assistant", "content": "Hi", "tool_calls": [
        {"id": "call_1", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}]}
    assert whole["done"] is True and whole["eval_count"] == 2
    empty = reply.empty("unload")
    del empty["created_at"]
    assert empty == {"model": "m", "message": {"role": "assistant", "content": ""}, "done": True,
                     "done_reason": "unload"}
