"""Keepalives in every streaming dialect: while the job waits in the queue and while its
prompt is prefilled, before anything is generated (docs/requests.rst: "Streams start as soon as the job is
accepted; while the prompt is processed the server sends an SSE comment").

The dialects are the POST routes of the route table that stream: a route added to the table
must be named here as streaming (with a request) or not, or the guard test fails. A keepalive
is the `: prefill` comment, or Anthropic's `ping` event (its keepalive once message_start is out).

The slow server has an audio projector slow enough to watch (a Whisper encoder 256 wide): the
keepalive goes on while a clip's 30-second windows are encoded, in a streamed transcription (a
multipart form) and a chat stream with an input_audio part, and a client that leaves while a
long clip encodes cancels the job between its windows (/metrics counts the windows encoded).
Before that, a long clip's decode (libmtmd's resampling and log-mel, dialects/media_wait.py)
opens the stream with the keepalive too, and a client that leaves then stops the request before
it becomes a job.
"""

from __future__ import annotations

from collections.abc import Callable
import base64
import json
import random
import re
from dataclasses import dataclass

import pytest

from conftest import ServerProcess, slow_model
from rawhttp import RawConnection, post_json, request, request_id_of
from sse import parse_sse
from tinyaudio import write_tiny_audio_mmproj
from tinymodel import NO_EOG

from localserve.app import App
from localserve.audio import MAX_AUDIO_SECONDS
from localserve.audio_headers import canonical_wav
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
    # llama-server's path for the same Chat Completions (dialects/openai/routes.py)
    "/chat/completions": Dialect(
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
                 "/lora-adapters",                  # global LoRA scales (dialects/llamacpp/lora_adapters.py)
                 "/models",      # POST /models starts a download in the background; /models/sse reports it
                 "/v1/audio/translations"}       # a multipart form; never streamed, as OpenAI's are not
# Streams read from a multipart form (an audio file): the same pump and keepalives as the chat routes
# (dialects/openai/transcriptions.py's TranscriptEvents), exercised while the clip encodes
# (test_keepalives_while_a_clip_is_encoded).
MULTIPART_STREAMING = {"/v1/audio/transcriptions": lambda clip, n: transcription_form(clip, n, stream=True)}
# Ollama's NDJSON streams: no comment line exists there, so their keepalive is silence
SILENT_STREAMING = {"/api/chat", "/api/generate", "/api/pull"}


def test_every_post_route_of_the_table_is_named_streaming_or_not():
    posts = {route.pattern for route in App(Settings()).router.routes if "POST" in route.methods}
    named = set(STREAMING) | NOT_STREAMING | SILENT_STREAMING | set(MULTIPART_STREAMING)
    assert posts == named, f"new: {sorted(posts - named)}, gone: {sorted(named - posts)}"


@pytest.fixture(scope="module")
def slow_server(models_dir, tmp_path_factory):
    # a Whisper encoder 256 wide: a 30-second window takes a visible while to encode
    mmproj = write_tiny_audio_mmproj(tmp_path_factory.mktemp("slowaudio") / "mmproj-slow-audio.gguf",
                                     n_embd_text=256, n_embd=256, n_head=4, n_ff=1024, n_layer=2)
    srv = ServerProcess(slow_model(models_dir), "--model-id", "slow", "--ctx-size", "8192",
                        "--prefill-keepalive", "0.2", "--slots", "1", "--no-store", "--mmproj", str(mmproj))
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


# ---- while a clip is encoded ----------------------------------------------------------------

WINDOW_SECONDS = 30                       # one audio chunk of the Whisper encoder a window


def clip(windows: int, seed: int) -> bytes:
    """A WAV of noise (8 kHz, 8-bit: small on the wire) just past `windows - 1` whole windows:
    `windows` audio chunks. Each seed its own clip, so none comes from the cache."""
    samples = random.Random(seed).randbytes(((windows - 1) * WINDOW_SECONDS + 1) * 8000)
    return canonical_wav(1, 1, 8000, 8, samples)


def transcription_form(data: bytes, n: int, *, stream: bool, boundary: str = "slowaudio") -> bytes:
    fields = {"model": "slow", "max_tokens": str(n), "logit_bias": json.dumps(NO_EOG), "stream": str(stream).lower()}
    body = b"".join(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
                    for name, value in fields.items())
    body += (f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="clip.wav"\r\n'
             f"Content-Type: audio/wav\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return (f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: localhost\r\n"
            f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {len(body)}\r\n\r\n"
            ).encode() + body


def chat_with_audio(data: bytes, n: int) -> bytes:
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": "wav"}}
    return post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is said?"}, part]}], "max_tokens": n, "stream": True, "logit_bias": NO_EOG})


AUDIO_STREAMS = {**MULTIPART_STREAMING, "/v1/chat/completions input_audio": chat_with_audio}
AUDIO_ENDS = {"/v1/audio/transcriptions": b'"type":"transcript.text.done"',
              "/v1/chat/completions input_audio": b"data: [DONE]"}


def audio_chunks_encoded(server) -> float:
    body = request(server.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").body
    found = re.search(r"^localserve_audio_chunks_encoded_total ([0-9.e+]+)$", body.decode(), re.M)
    return float(found.group(1)) if found else 0.0


@pytest.mark.parametrize("route", AUDIO_STREAMS)
def test_keepalives_while_a_clip_is_encoded(slow_server, route):
    before = audio_chunks_encoded(slow_server)
    conn = RawConnection(slow_server.port, timeout=120)
    try:
        conn.send(AUDIO_STREAMS[route](clip(4, seed=len(route)), 2))
        resp = conn.read_response()
    finally:
        conn.close()
    assert resp.status == 200 and resp.header("content-type") == "text/event-stream", resp.body[:300]
    assert keepalives_before_generation(resp.body, Dialect(lambda *_: {}, None, b"")) >= 2
    assert AUDIO_ENDS[route] in resp.body
    assert audio_chunks_encoded(slow_server) - before == 4


def test_a_client_gone_while_a_clip_is_encoded_cancels_between_its_windows(slow_server):
    before = audio_chunks_encoded(slow_server)
    conn = RawConnection(slow_server.port, timeout=120)
    conn.send(MULTIPART_STREAMING["/v1/audio/transcriptions"](clip(10, seed=99), 2))
    received = b""
    # the head is out while the clip is decoded (media_wait.py); a keepalive after that with a
    # window encoded: the job runs
    while b": prefill" not in received or audio_chunks_encoded(slow_server) == before:
        chunk = conn.sock.recv(4096)
        assert chunk, received
        received += chunk
    conn.close()
    assert slow_server.wait_cancelled(request_id_of(received), "client went away", timeout=60), slow_server.log[-2000:]
    assert audio_chunks_encoded(slow_server) - before < 10          # the rest were never encoded
    conn = RawConnection(slow_server.port, timeout=120)             # and the server goes on
    try:
        conn.send(MULTIPART_STREAMING["/v1/audio/transcriptions"](clip(1, seed=100), 2))
        assert b"transcript.text.done" in conn.read_response().body
    finally:
        conn.close()


# ---- while a clip is decoded, before there is a job ------------------------------------------

def long_clip(seed: int) -> bytes:
    """MAX_AUDIO_SECONDS of noise at 44.1 kHz, 8-bit (13 MB): its resampling and log-mel take the
    decode well past the slow server's keepalive interval."""
    return canonical_wav(1, 1, 44100, 8, random.Random(seed).randbytes(int(MAX_AUDIO_SECONDS) * 44100))


@pytest.mark.parametrize("route", AUDIO_STREAMS)
def test_a_long_decode_keeps_the_stream_alive_and_a_client_gone_stops_it_before_a_job(slow_server, route):
    before = audio_chunks_encoded(slow_server)
    conn = RawConnection(slow_server.port, timeout=120)
    conn.send(AUDIO_STREAMS[route](long_clip(seed=len(route) + 7), 2))
    received = conn.read_until(b": prefill")      # the head and a keepalive, while the clip is decoded
    conn.close()
    request_id = request_id_of(received)
    assert slow_server.wait_log(f"({request_id}): the client left while its prompt was built; stopped", timeout=60), \
        slow_server.log[-2000:]
    assert audio_chunks_encoded(slow_server) == before                    # no job: nothing encoded
