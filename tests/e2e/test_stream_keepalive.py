"""Keepalives in every streaming dialect: while the job waits in the queue and while its
prompt is prefilled, before anything is generated (docs/requests.rst: "Streams start as soon as the job is
accepted; while the prompt is processed the server sends an SSE comment").

The dialects are the POST routes of the route table that stream: a route added to the table
must be named here as streaming (with a request) or not, or the guard test fails. A keepalive
is the `: prefill` comment, or Anthropic's `ping` event (its keepalive once message_start is out).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from conftest import ServerProcess, slow_model
from rawhttp import RawConnection, post_json
from sse import parse_sse
from tinymodel import NO_EOG

from localserve.app import App
from localserve.settings import Settings

LONG_PROMPT = "hello world " * 1500          # ~3000 tokens: seconds of prefill on the slow model
QUEUED_WAIT = 10.0                           # seconds a queued stream may wait for its keepalives (0.2 s apart)


@dataclass(frozen=True)
class Dialect:
    body: Callable[[str, int], dict]    # (prompt, max_tokens) → the streaming request body
    generating: str | None              # the event name that shows generation has begun (None: a bare data line)
    end: bytes                          # what the stream's last event holds


STREAMING = {
    "/v1/chat/completions": Dialect(
        lambda prompt, n: {"messages": [{"role": "user", "content": prompt}], "max_tokens": n, "stream": True,
                           "logit_bias": NO_EOG}, None, b"data: [DONE]"),
    "/v1/completions": Dialect(
        lambda prompt, n: {"prompt": prompt, "max_tokens": n, "stream": True, "logit_bias": NO_EOG},
        None, b"data: [DONE]"),
    "/v1/responses": Dialect(
        lambda prompt, n: {"input": prompt, "max_output_tokens": n, "stream": True, "store": False,
                           "logit_bias": NO_EOG}, "response.output_item.added", b"event: response.incomplete"),
    "/v1/messages": Dialect(
        lambda prompt, n: {"model": "m", "max_tokens": n, "messages": [{"role": "user", "content": prompt}],
                           "stream": True, "logit_bias": NO_EOG}, "content_block_start", b"event: message_stop"),
    "/infill": Dialect(
        lambda prompt, n: {"input_prefix": prompt, "input_suffix": "", "n_predict": n, "stream": True,
                           "logit_bias": NO_EOG}, None, b'"stop":true'),
    # llama-server's own: bare data lines, the last with "stop": true (dialects/llamacpp/)
    "/completion": Dialect(
        lambda prompt, n: {"prompt": prompt, "n_predict": n, "stream": True, "logit_bias": NO_EOG},
        None, b'"stop":true'),
    "/completions": Dialect(
        lambda prompt, n: {"prompt": prompt, "n_predict": n, "stream": True, "logit_bias": NO_EOG},
        None, b'"stop":true'),
}
# POST routes that never answer with a stream
NOT_STREAMING = {"/v1/embeddings", "/v1/rerank", "/rerank", "/tokenize", "/detokenize", "/apply-template",
                 "/v1/responses/compact",
                 "/models/load", "/models/unload", "/v1/responses/{response_id}/cancel", "/v1/conversations",
                 "/v1/conversations/{conversation_id}", "/v1/conversations/{conversation_id}/items",
                 "/v1/messages/count_tokens", "/api/show", "/api/embed", "/api/embeddings", "/api/push",
                 "/api/create", "/api/copy",
                 # llama-server's own (dialects/llamacpp/)
                 "/embedding", "/embeddings", "/reranking", "/v1/reranking", "/props", "/slots/{id_slot}",
                 "/chat/completions/input_tokens", "/v1/chat/completions/input_tokens",
                 "/responses/input_tokens", "/v1/responses/input_tokens",
                 "/models"}      # POST /models starts a download in the background; /models/sse reports it
# Streams read from a multipart form (an audio file): the same pump and keepalives as the chat routes
# (dialects/openai/transcriptions.py's TranscriptEvents); their keepalives are not exercised here
MULTIPART_STREAMING = {"/v1/audio/transcriptions", "/v1/audio/translations"}
# Ollama's NDJSON streams: no comment line exists there, so their keepalive is silence
SILENT_STREAMING = {"/api/chat", "/api/generate", "/api/pull"}


def test_every_post_route_of_the_table_is_named_streaming_or_not():
    posts = {route.pattern for route in App(Settings()).router.routes if "POST" in route.methods}
    named = set(STREAMING) | NOT_STREAMING | SILENT_STREAMING | MULTIPART_STREAMING
    assert posts == named, f"new: {sorted(posts - named)}, gone: {sorted(named - posts)}"


@pytest.fixture(scope="module")
def slow_server(models_dir):
    srv = ServerProcess(slow_model(models_dir), "--model-id", "slow", "--ctx-size", "8192",
                        "--prefill-keepalive", "0.2", "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def keepalives_before_generation(body: bytes, dialect: Dialect) -> int:
    """Keepalive events before the first generated one; Anthropic's ping that comes with
    message_start itself is part of the start, not a keepalive."""
    count, previous = 0, None
    for name, data in parse_sse(body, comments=True):
        if name == ":" or (name == "ping" and previous != "message_start"):
            count += 1
        elif (name == dialect.generating) if dialect.generating else (name is None and data is not None):
            return count
        previous = name
    raise AssertionError(f"nothing was generated: {body[:300]!r}")


def generation_marker(dialect: Dialect) -> bytes:
    return f"event: {dialect.generating}".encode() if dialect.generating else b"data: {"


@pytest.mark.parametrize("path", STREAMING)
def test_keepalives_while_the_prompt_is_prefilled(slow_server, path):
    dialect = STREAMING[path]
    conn = RawConnection(slow_server.port, timeout=60)
    try:
        # a prompt of its own: one the slot holds from another test would need no prefill
        conn.send(post_json(path, dialect.body(f"{path} {LONG_PROMPT}", 2)))
        resp = conn.read_response()
    finally:
        conn.close()
    assert resp.status == 200 and resp.header("content-type") == "text/event-stream"
    assert keepalives_before_generation(resp.body, dialect) >= 2
    assert dialect.end in resp.body


def test_an_ndjson_stream_is_silent_while_its_prompt_is_prefilled(slow_server):
    conn = RawConnection(slow_server.port, timeout=60)
    try:
        conn.send(post_json("/api/generate", {"model": "slow", "prompt": f"ndjson {LONG_PROMPT}",
                                              "options": {"num_predict": 2, "logit_bias": NO_EOG}}))
        resp = conn.read_response()
    finally:
        conn.close()
    assert resp.status == 200 and resp.header("content-type") == "application/x-ndjson"
    lines = resp.body.split(b"\n")
    assert lines[-1] == b"" and all(line.startswith(b"{") for line in lines[:-1]), resp.body[:300]
    assert b'"done":true' in lines[-2] and b'"prompt_eval_count"' in lines[-2]


# /infill is left out: an editor completion does not queue behind a chat, it parks it
# (runtime/preempt.py; test_infill_preempt)
@pytest.mark.parametrize("path", [path for path in STREAMING if path != "/infill"])
def test_keepalives_while_queued_then_the_freed_slot(slow_server, path):
    dialect = STREAMING[path]
    running = RawConnection(slow_server.port)
    running.send(post_json("/v1/chat/completions", STREAMING["/v1/chat/completions"].body("hi", 4000)))
    started = b""
    while b"data: {" not in started:            # decoding: the only slot is busy
        started += running.sock.recv(65536)
    queued = RawConnection(slow_server.port, timeout=QUEUED_WAIT)
    try:
        queued.send(post_json(path, dialect.body("hi", 3)))
        waited = b""
        while waited.count(b": prefill\n\n") + waited.count(b"event: ping\n") < 2:
            chunk = queued.sock.recv(4096)          # a stream silent while queued times out here
            assert chunk, waited
            waited += chunk
        assert generation_marker(dialect) not in waited
        running.close()
        queued.sock.settimeout(60)
        while dialect.end not in waited:            # the freed slot takes it
            chunk = queued.sock.recv(65536)
            assert chunk, waited[-300:]
            waited += chunk
    finally:
        running.close()
        queued.close()
