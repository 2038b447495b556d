"""The one stream loop (dialects/pump.py) on its own: a real ResponseWriter over a socket pair,
a source of runtime events, and the dialects' stream shapes (events in, frames out, no I/O).
End-to-end streams through every dialect are in test_chat, test_anthropic and test_responses*."""

from __future__ import annotations

import json
import socket

import pytest

from localserve.dialects.exchange import Exchange
from localserve.dialects.openai.chat import ChatChunks
from localserve.dialects.pump import KEEPALIVE, PREFILL_COMMENT, pump
from localserve.errors import ClientGone
from localserve.generation import (ActiveGeneration, Chunk, Context, Finished, GenerationFailure, GenerationOutput,
                                   GenerationRequest)
from localserve.wire.response_writer import ResponseWriter
from localserve.wire.http import Request

META = {"id": "chatcmpl-1", "created": 1, "model": "m"}
DONE = Finished(output=GenerationOutput(content="Hi!", completion_tokens=2))


def exchange() -> tuple[Exchange, socket.socket]:
    ours, theirs = socket.socketpair()
    req = Request("POST", "/v1/chat/completions", "/v1/chat/completions", {}, "HTTP/1.1", [("host", "x")], b"{}")
    return Exchange(req, ResponseWriter(ours, req), {}), theirs


def body_chunks(sock: socket.socket) -> list[bytes]:
    """The HTTP chunks of the response body: one per write the pump made."""
    sock.settimeout(2)
    data = b""
    while not data.endswith(b"\r\n0\r\n\r\n"):
        more = sock.recv(65536)
        assert more, data
        data += more
    rest, chunks = data.split(b"\r\n\r\n", 1)[1], []
    while True:
        size_line, rest = rest.split(b"\r\n", 1)
        size = int(size_line, 16)
        if size == 0:
            return chunks
        chunks.append(rest[:size])
        rest = rest[size + 2:]


def test_frames_wait_until_the_source_is_idle_and_go_in_one_write():
    ex, theirs = exchange()
    events = [Context(3, 64), Chunk(False, "H"), Chunk(False, "i"), Chunk(False, "!"), DONE]
    pump(ex, ChatChunks(META, include_usage=False), events, idle=lambda: False)
    chunks = body_chunks(theirs)
    assert len(chunks) == 1
    frames = chunks[0].split(b"\n\n")
    assert frames[-2:] == [b"data: [DONE]", b""]
    text = "".join(json.loads(f[6:])["choices"][0]["delta"].get("content", "") for f in frames[:-2])
    assert text == "Hi!"


def test_a_keepalive_goes_out_at_once():
    ex, theirs = exchange()
    pump(ex, ChatChunks(META, include_usage=False), [KEEPALIVE, Chunk(False, "Hi!"), DONE], idle=lambda: False)
    chunks = body_chunks(theirs)
    assert chunks[0] == PREFILL_COMMENT and len(chunks) == 2


def test_an_error_after_the_head_goes_in_band_then_the_end():
    ex, theirs = exchange()
    failed = Finished(error=GenerationFailure("the engine failed to decode (status -1)"))
    pump(ex, ChatChunks(META, include_usage=False), [Chunk(False, "Hi"), failed])
    frames = b"".join(body_chunks(theirs)).split(b"\n\n")
    assert json.loads(frames[-3][6:]) == {"error": {"message": "the engine failed to decode (status -1)",
                                                    "type": "server_error", "param": None, "code": "server_error"}}
    assert frames[-2] == b"data: [DONE]"


def test_a_client_gone_cancels_the_job_and_stops_reading_the_source():
    ex, theirs = exchange()
    theirs.close()
    gen = ActiveGeneration(GenerationRequest(prompt_tokens=[1, 2, 3]))
    read = []

    def source():
        for event in [Chunk(False, "a"), Chunk(False, "b"), DONE]:
            read.append(event)
            yield event

    with pytest.raises(ClientGone):
        pump(ex, ChatChunks(META, include_usage=False), source(), job=gen)
    assert gen.cancelled and gen.cancel_reason == "client went away during the stream"
    assert len(read) < 3

