"""Waiting on a job from a connection thread: keepalives and disconnect watching.

Two ways to wait, shared by every dialect:
- wait_for_output: a non-streaming answer. Peeks at the socket every
  DISCONNECT_POLL_INTERVAL; a client that left cancels the job and gets nothing.
- stream_events: yields the job's events for a stream, plus KEEPALIVE whenever
  the prefill keepalive interval passes before the first token. A failed write
  (ClientGone) or a closed socket cancels the job.
The dialect modules shape the events; nothing here knows a wire format.
"""

from __future__ import annotations

import contextlib
import queue
import time
from typing import Iterator

import orjson

from ..wire.connection import ClientGone
from ..errors import ApiError
from ..generation import (ActiveGeneration, Chunk, Finished, GenerationOutput, GenerationRequest,
                         ToolCallDelta, ToolCallStart)
from ..wire.routes import Exchange
from ..generation import GrammarBacklog, QueueFull, RuntimeStopped
from ..settings import DISCONNECT_POLL_INTERVAL, GRAMMAR_RETRY_AFTER_SECONDS, RETRY_AFTER_SECONDS

KEEPALIVE = object()   # sentinel yielded by stream_events: time for a ": prefill" comment


def submit(exchange: Exchange, request: GenerationRequest) -> ActiveGeneration:
    try:
        return exchange.app.runtime.submit(request)
    except QueueFull:
        raise ApiError(503, "the server is busy: too many requests are queued; retry shortly",
                       code="server_overloaded", headers=[("Retry-After", str(RETRY_AFTER_SECONDS))]) from None
    except RuntimeStopped:
        raise ApiError(503, "the server is shutting down", code="server_shutting_down") from None
    except GrammarBacklog:
        raise ApiError(503, "the server is still finishing grammar work that went over the time limit; "
                            "retry a request with a grammar or schema later", code="server_overloaded",
                       headers=[("Retry-After", str(GRAMMAR_RETRY_AFTER_SECONDS))]) from None


def error_from(finished: Finished) -> ApiError:
    err = finished.error
    return ApiError(err.status, err.message, code=err.code, extra=err.extra)


def wait_for_output(exchange: Exchange, gen: ActiveGeneration) -> GenerationOutput:
    """Block until the job finishes; raises ClientGone (job cancelled) or ApiError."""
    next_peek = time.monotonic() + DISCONNECT_POLL_INTERVAL
    while True:
        try:
            event = gen.events.get(timeout=DISCONNECT_POLL_INTERVAL)
        except queue.Empty:
            event = None
        # Peek on the clock, not only when the queue goes quiet: a fast decode never lets it.
        if time.monotonic() >= next_peek:
            next_peek = time.monotonic() + DISCONNECT_POLL_INTERVAL
            if exchange.writer.peer_closed():
                gen.cancel("client closed the connection while waiting")
                raise ClientGone("peer closed")
        if isinstance(event, Finished):
            if event.error is not None:
                raise error_from(event)
            return event.output


def stream_events(exchange: Exchange, gen: ActiveGeneration, keepalive: float) -> Iterator[object]:
    """The job's events; KEEPALIVE while nothing has been generated yet. Cancels on disconnect."""
    writer = exchange.writer
    started = False
    next_keepalive = time.monotonic() + keepalive if keepalive > 0 else None
    try:
        while True:
            try:
                event = gen.events.get(timeout=DISCONNECT_POLL_INTERVAL)
            except queue.Empty:
                if writer.peer_closed():
                    raise ClientGone("peer closed")
                if not started and next_keepalive is not None and time.monotonic() >= next_keepalive:
                    next_keepalive = time.monotonic() + keepalive
                    yield KEEPALIVE
                continue
            if isinstance(event, (Chunk, ToolCallStart, ToolCallDelta)):
                started = True
            yield event
            if isinstance(event, Finished):
                return
    except (ClientGone, GeneratorExit):
        gen.cancel("client went away during the stream")
        raise


def flush_when_idle(exchange: Exchange, gen: ActiveGeneration, buffer: list[bytes], event: object) -> None:
    """Write the buffered events once the job has nothing more queued: one write for several tokens."""
    if buffer and (isinstance(event, Finished) or gen.events.empty()):
        exchange.writer.stream(b"".join(buffer))
        buffer.clear()


@contextlib.contextmanager
def cancel_on_error(gen: ActiveGeneration):
    """Around everything between submit and the job's end: whatever fails there cancels the job,
    so no job runs on with nobody to read it."""
    try:
        yield
    except BaseException as exc:
        gen.cancel(f"the request failed while its job ran ({type(exc).__name__})")
        raise


@contextlib.contextmanager
def cancel_on_disconnect(gen: ActiveGeneration):
    """Around a stream's writes: a client that went away cancels the job at once."""
    try:
        yield
    except ClientGone:
        gen.cancel("client went away during the stream")
        raise


def sse(data: object, event: str | None = None) -> bytes:
    payload = data if isinstance(data, bytes) else orjson.dumps(data)
    if event:
        return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"
    return b"data: " + payload + b"\n\n"


PREFILL_COMMENT = b": prefill\n\n"
