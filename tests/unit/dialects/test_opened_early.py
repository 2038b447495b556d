"""A stream's head sent before its handler knows the answer (pump.open_stream_early: a model
load's notice, a long decode's, a compaction's comments): whatever fails after it, in the
compaction, in the prompt built from its summary or once it returned (the job's submission),
ends the stream with the route's own error event, never a cut connection. Over a real socket
pair and the real response writer."""

from __future__ import annotations

import json
import socket
from types import SimpleNamespace

from localserve.dialects.anthropic import compacting as anthropic_compacting
from localserve.dialects.anthropic.errors import ANTHROPIC_ERRORS
from localserve.dialects.exchange import Exchange
from localserve.dialects.loading import serve_with_model
from localserve.dialects.responses import compaction_steps, handlers
from localserve.dialects.responses.errors import RESPONSES_ERRORS
from localserve.dialects.responses.runs import ResponseRun
from localserve.errors import ApiError, ErrorShape
from localserve.generation import ActiveGeneration, Chunk, Context, GenerationRequest
from localserve.wire.http import Request
from localserve.wire.response_writer import ResponseWriter
from .test_loading import ModelThereAtOnce, _read


def _exchange(path: str, errors: ErrorShape) -> tuple[Exchange, socket.socket]:
    ours, theirs = socket.socketpair()
    req = Request("POST", path, path, {}, "HTTP/1.1", [("host", "x")], b"{}")
    return Exchange(req, ResponseWriter(ours, req), {}, errors, "req_test"), theirs


def _served(exchange: Exchange, theirs: socket.socket, serve) -> tuple[str, list[tuple[str, dict]]]:
    """What the client read: the comments before the first event, and the events."""
    serve_with_model(exchange, ModelThereAtOnce(), {}, serve)
    exchange.writer.sock.close()
    received = _read(theirs)
    assert received.startswith(b"HTTP/1.1 200") and received.endswith(b"0\r\n\r\n"), received
    body = b"".join(line for line in received.split(b"\r\n\r\n", 1)[1].split(b"\r\n")[1::2]).decode()
    frames = [frame for frame in body.split("\n\n") if frame]
    comments = "".join(frame for frame in frames if frame.startswith(":"))
    events = []
    for frame in frames:
        if not frame.startswith(":"):
            name, data = frame.split("\n", 1)
            events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return comments, events


def test_a_responses_prompt_that_fails_after_a_compaction_comment_is_its_error_event():
    exchange, theirs = _exchange("/v1/responses", RESPONSES_ERRORS)

    def serve(model):
        compaction_steps._comment(exchange)       # a piece summarised: the head went out
        raise ApiError(400, "the request needs 1500 prompt tokens but the context holds 1024",
                       param="input", code="context_length_exceeded")
    comments, events = _served(exchange, theirs, serve)
    assert comments == ": compacting"
    assert events == [("error", {"type": "error", "code": "context_length_exceeded", "param": "input",
                                 "message": "the request needs 1500 prompt tokens but the context holds 1024",
                                 "sequence_number": 0})]


def test_what_fails_once_the_compaction_returned_goes_in_the_stream_too():
    # the job's submission (a full queue), or anything unforeseen: the head is out all the same
    for failure, code in ((ApiError(503, "the server is busy", code="server_overloaded"), "server_overloaded"),
                          (RuntimeError("unforeseen"), "server_error")):
        exchange, theirs = _exchange("/v1/responses", RESPONSES_ERRORS)

        def serve(model):
            compaction_steps._comment(exchange)
            raise failure
        comments, events = _served(exchange, theirs, serve)
        assert [(name, data["code"], data["sequence_number"]) for name, data in events] == [("error", code, 0)]


def test_an_anthropic_stream_opened_by_its_compaction_ends_with_its_error_event():
    exchange, theirs = _exchange("/v1/messages", ANTHROPIC_ERRORS)

    def serve(model):
        anthropic_compacting._keepalive(exchange)
        raise ApiError(503, "the server is busy", code="server_overloaded")
    comments, events = _served(exchange, theirs, serve)
    assert comments == ": prefill"
    assert events == [("error", {"type": "error", "error": {"type": "overloaded_error",
                                                            "message": "the server is busy"}})]


def test_a_run_that_fails_while_it_streams_ends_with_its_response_failed_numbered_on():
    # the head went out early (a compaction's comment), the run's events followed, then something
    # unforeseen failed in the stream: the run's own response.failed, its number the next
    exchange, theirs = _exchange("/v1/responses", RESPONSES_ERRORS)
    plan = SimpleNamespace(response={"id": "resp_1", "object": "response", "status": "in_progress", "output": []},
                           summary=False, parallel_tool_calls=True, logprobs=False, tool_kinds={}, seal=None,
                           compaction=None, triggered=False, seal_compaction=None, compaction_usage=None,
                           store=False)
    gen = ActiveGeneration(GenerationRequest([1]))
    run = ResponseRun(plan, gen, None)
    shaper_feed = run.shaper.feed

    def feed(event):
        if isinstance(event, Chunk) and event.text == "boom":
            raise RuntimeError("unforeseen")
        return shaper_feed(event)
    run.shaper.feed = feed
    for event in (Context(3, 64), Chunk(False, "Hi"), Chunk(False, "boom")):
        gen.events.put(event)

    def serve(model):
        compaction_steps._comment(exchange)
        run.begin()
        handlers.stream_run(exchange, run, 0)
    comments, events = _served(exchange, theirs, serve)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert [name for name, _ in events][-2:] == ["response.output_item.done", "response.failed"]
    assert run.done and gen.cancelled and run.response["status"] == "failed"
    assert [e["type"] for e in run.events] == [name for name, _ in events]     # as stored, so replayed
