"""What a stream says when something fails after its head went out (pump.fail_in_band): not the
job (a failed Finished: test_pump), but the stream itself, its source of events or its shape
raising. Every dialect ends such a stream the way its API ends one that failed, then the stream's
end: OpenAI's `data: {"error": ...}` (openai-python raises on it) and [DONE], Responses'
response.failed numbered on, Anthropic's `event: error`, Ollama's `{"error": ...}` line,
llama-server's /completion `data: {"error": {"code": 500, ...}}`. The job is cancelled, the
traceback logged once. Over a real socket pair and the real response writer; the events are
real runtime events, the shapes the dialects' own."""

from __future__ import annotations

import json
import logging
import socket
from types import SimpleNamespace

import pytest

from localserve.dialects.anthropic.errors import ANTHROPIC_ERRORS
from localserve.dialects.anthropic.replies import MessageMeta, MessageStream
from localserve.dialects.exchange import Exchange
from localserve.dialects.infill import InfillChunks
from localserve.dialects.llamacpp.completion import CompletionChunks as LlamaCompletionChunks
from localserve.dialects.llamacpp.errors import LLAMA_ERRORS
from localserve.dialects.llamacpp.several_prompts import SeveralChunks
from localserve.dialects.ollama.errors import OLLAMA_ERRORS
from localserve.dialects.ollama.replies import Answer, NdjsonLines
from localserve.dialects.openai.chat import ChatChunks
from localserve.dialects.openai.completions import CompletionChunks
from localserve.dialects.openai.errors import OPENAI_ERRORS
from localserve.dialects.openai.transcriptions import TranscriptEvents
from localserve.dialects.pump import pump
from localserve.dialects.responses.errors import RESPONSES_ERRORS
from localserve.dialects.responses.handlers import Replay, RunStream
from localserve.dialects.responses.runs import ResponseRun
from localserve.errors import ApiError, ErrorShape
from localserve.generation import ActiveGeneration, Chunk, Context, GenerationRequest, ToolCallDelta, ToolCallStart
from localserve.wire.http import Request
from localserve.wire.response_writer import ResponseWriter

META = {"id": "chatcmpl-1", "created": 1, "model": "m"}
EVENTS = [Context(3, 64), Chunk(False, "Hi"), ToolCallStart(0, "call_1", "f"), ToolCallDelta(0, '{"a":')]
OPENAI_500 = {"error": {"message": "internal server error", "type": "server_error", "param": None,
                        "code": "server_error"}}
LLAMA_500 = {"error": {"code": 500, "message": "internal server error", "type": "server_error"}}


def exchange(path: str, errors: ErrorShape) -> tuple[Exchange, socket.socket]:
    ours, theirs = socket.socketpair()
    req = Request("POST", path, path, {}, "HTTP/1.1", [("host", "x")], b"{}")
    return Exchange(req, ResponseWriter(ours, req), {}, errors, "req_1"), theirs


def body(sock: socket.socket) -> bytes:
    """The response body, read to its last chunk (the stream ended: it was not cut)."""
    sock.settimeout(2)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        more = sock.recv(65536)
        assert more, f"the connection was cut: {data!r}"
        data += more
    assert data.startswith(b"HTTP/1.1 200")
    rest, out = data.split(b"\r\n\r\n", 1)[1], b""
    while (size := int(rest.split(b"\r\n", 1)[0], 16)) > 0:
        start = rest.index(b"\r\n") + 2
        out, rest = out + rest[start:start + size], rest[start + size + 2:]
    return out


def sse_frames(data: bytes) -> list[tuple[str | None, object]]:
    """(event name, data) of each SSE frame; data "[DONE]" stays a string."""
    frames = []
    for frame in data.decode().split("\n\n"):
        if not frame or frame.startswith(":"):
            continue
        fields = dict(line.split(": ", 1) for line in frame.split("\n"))
        frames.append((fields.get("event"), fields["data"] if fields["data"] == "[DONE]" else json.loads(fields["data"])))
    return frames


def failing(events: list, error: Exception = RuntimeError("the source broke")):
    """A source of real events that raises after them, as a broken source would."""
    yield from events
    raise error


def run_plan() -> SimpleNamespace:
    return SimpleNamespace(response={"id": "resp_1", "object": "response", "status": "in_progress", "output": []},
                           summary=False, parallel_tool_calls=True, logprobs=False, tool_kinds={}, seal=None,
                           compaction=None, triggered=False, seal_compaction=None, compaction_usage=None,
                           store=False)


def infill_final(index: int = 0) -> SimpleNamespace:
    """What a stream of /infill or /completion reads of its final object before the end (nothing
    else: the stream fails before its job ends)."""
    return SimpleNamespace(plan=SimpleNamespace(request=GenerationRequest([1, 2, 3])), index=index)


# (route, its error shape, the stream's shape, what the stream ends with after the events)
SSE_CASES = [
    ("/v1/chat/completions", OPENAI_ERRORS, lambda gen: ChatChunks(META, include_usage=True),
     [(None, OPENAI_500), (None, "[DONE]")]),
    ("/v1/completions", OPENAI_ERRORS, lambda gen: CompletionChunks(META, include_usage=False, echo="say"),
     [(None, OPENAI_500), (None, "[DONE]")]),
    ("/v1/messages", ANTHROPIC_ERRORS, lambda gen: MessageStream(MessageMeta("msg_1", "m", b"k" * 32), 3),
     [("error", {"type": "error", "error": {"type": "api_error", "message": "internal server error"}})]),
    ("/completion", LLAMA_ERRORS, lambda gen: LlamaCompletionChunks(infill_final()), [(None, LLAMA_500)]),
    ("/completion", LLAMA_ERRORS, lambda gen: SeveralChunks([InfillChunks(infill_final())]), [(None, LLAMA_500)]),
    ("/infill", OPENAI_ERRORS, lambda gen: InfillChunks(infill_final()), [(None, OPENAI_500)]),
    ("/v1/audio/transcriptions", OPENAI_ERRORS, lambda gen: TranscriptEvents(gen.request), [(None, OPENAI_500)]),
]


def events_for(shape) -> list:
    """EVENTS as the shape reads them (the several prompts' stream: (index, event))."""
    return [(0, e) for e in EVENTS] if isinstance(shape, SeveralChunks) else EVENTS


@pytest.mark.parametrize("path,errors,make,ending", SSE_CASES)
def test_a_source_that_raises_ends_the_stream_with_the_dialects_error_event(path, errors, make, ending, caplog):
    ex, theirs = exchange(path, errors)
    gen = ActiveGeneration(GenerationRequest([1, 2, 3]))
    shape = make(gen)
    with caplog.at_level(logging.ERROR):
        pump(ex, shape, failing(events_for(shape)), job=gen)
    frames = sse_frames(body(theirs))
    assert frames[-len(ending):] == ending
    assert len(frames) > len(ending)            # what came before the failure went out first
    assert gen.cancelled and "the stream failed" in gen.cancel_reason
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1 and "the source broke" in str(tracebacks[0].exc_info[1])


@pytest.mark.parametrize("path,errors,make,ending", SSE_CASES)
def test_a_shape_that_raises_on_an_event_ends_the_stream_the_same_way(path, errors, make, ending):
    # a lone surrogate is no UTF-8: the shape's JSON encoder raises on the event
    ex, theirs = exchange(path, errors)
    gen = ActiveGeneration(GenerationRequest([1, 2, 3]))
    shape = make(gen)
    broken = [(0, Chunk(False, "\ud800"))] if isinstance(shape, SeveralChunks) else [Chunk(False, "\ud800")]
    pump(ex, shape, events_for(shape)[:2] + broken + events_for(shape)[2:], job=gen)
    assert sse_frames(body(theirs))[-len(ending):] == ending
    assert gen.cancelled


def test_an_api_error_raised_in_the_stream_is_that_error_and_no_traceback(caplog):
    ex, theirs = exchange("/v1/messages", ANTHROPIC_ERRORS)
    gen = ActiveGeneration(GenerationRequest([1, 2, 3]))
    with caplog.at_level(logging.WARNING):
        pump(ex, MessageStream(MessageMeta("msg_1", "m", b"k" * 32), 3),
             failing(EVENTS, ApiError(503, "the server is busy", code="server_overloaded")), job=gen)
    assert sse_frames(body(theirs))[-1] == ("error", {"type": "error", "error": {"type": "overloaded_error",
                                                                                 "message": "the server is busy"}})
    assert gen.cancelled and not any(r.exc_info for r in caplog.records)


@pytest.mark.parametrize("chat", [True, False])
def test_an_ollama_stream_ends_with_its_error_line(chat):
    ex, theirs = exchange("/api/chat" if chat else "/api/generate", OLLAMA_ERRORS)
    gen = ActiveGeneration(GenerationRequest([1, 2, 3]))
    pump(ex, NdjsonLines(Answer("m:latest", chat=chat)), failing(EVENTS), job=gen)
    lines = [json.loads(line) for line in body(theirs).splitlines()]
    assert lines[-1] == {"error": "internal server error"}
    assert all(line["done"] is False for line in lines[:-1]) and lines[:-1]
    assert gen.cancelled


def test_a_responses_stream_ends_with_response_failed_numbered_on_and_its_job_stops():
    ex, theirs = exchange("/v1/responses", RESPONSES_ERRORS)
    gen = ActiveGeneration(GenerationRequest([1, 2, 3]))
    run = ResponseRun(run_plan(), gen, None)
    run.begin()
    pump(ex, RunStream(run), failing(EVENTS), job=run)
    frames = sse_frames(body(theirs))
    assert [data["sequence_number"] for _, data in frames] == list(range(len(frames)))
    assert [name for name, _ in frames][-3:] == ["response.function_call_arguments.done",
                                                 "response.output_item.done", "response.failed"]
    failed = frames[-1][1]["response"]
    assert failed["status"] == "failed" and failed["error"] == {"code": "server_error",
                                                                "message": "internal server error"}
    assert run.done and gen.cancelled         # the run ended failed; its job stops all the same


def test_a_failed_replay_says_so_numbered_after_what_it_sent():
    ex, theirs = exchange("/v1/responses/resp_1", RESPONSES_ERRORS)
    stored = [{"type": "response.created", "sequence_number": 5}, {"type": "response.in_progress",
                                                                   "sequence_number": 6}]
    pump(ex, Replay(4), failing([stored]))
    frames = sse_frames(body(theirs))
    assert [(name, data["sequence_number"]) for name, data in frames] == [
        ("response.created", 5), ("response.in_progress", 6), ("error", 7)]
    assert frames[-1][1]["code"] == "server_error"


class UnframableError(ChatChunks):
    """A shape that cannot frame its error either (as broken as the rest of it)."""

    def fail(self, error: ApiError) -> list[bytes]:
        raise RuntimeError("no frames")


def test_a_shape_that_cannot_frame_its_error_gets_the_routes_own_error_event():
    ex, theirs = exchange("/v1/chat/completions", OPENAI_ERRORS)
    gen = ActiveGeneration(GenerationRequest([1, 2, 3]))
    pump(ex, UnframableError(META, include_usage=False), failing(EVENTS), job=gen)
    assert sse_frames(body(theirs))[-1] == (None, OPENAI_500)
    assert gen.cancelled


def test_the_connection_serves_on_after_a_failed_stream():
    ex, theirs = exchange("/v1/chat/completions", OPENAI_ERRORS)
    gen = ActiveGeneration(GenerationRequest([1, 2, 3]))
    pump(ex, ChatChunks(META, include_usage=False), failing(EVENTS), job=gen)
    body(theirs)
    assert ex.writer.finished and not ex.writer.close_after


def test_a_failure_before_the_head_is_the_routers_to_answer(monkeypatch):
    ex, theirs = exchange("/v1/chat/completions", OPENAI_ERRORS)

    def no_head(**_):
        raise RuntimeError("no head")
    monkeypatch.setattr(ex.writer, "start_stream", no_head)
    with pytest.raises(RuntimeError, match="no head"):
        pump(ex, ChatChunks(META, include_usage=False), iter(EVENTS))
    assert not ex.stream_open
