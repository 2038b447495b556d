"""The one stream loop every dialect shares: live streams and Responses replays alike.

A dialect shapes its stream as a StreamShape: runtime events in, encoded SSE frames out,
no I/O. pump() owns everything else, once: the head, the `: prefill` keepalive while
nothing has been generated, the in-band error (the job failed after the head went out:
the dialect frames it, the route's ErrorShape gives its body), batching frames into one
write while more events wait, the end of the stream, and a client that went away: a
failed write or a closed socket cancels the job the stream reads, here and nowhere else.
Whatever else fails once the head is out (a shape or a source raising) ends the stream the
same way as a failed job, with the dialect's error event, and cancels the job (fail_in_band).

Sources are iterators of runtime events (or whatever the shape takes) with KEEPALIVE
whenever the keepalive interval passes with nothing to send (a live job's: job_events.job_events,
the one wait loop). They raise ClientGone when the socket closes while they wait.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import ClassVar, Protocol

import logging

import orjson

from ..errors import ApiError, ClientGone
from ..generation import ActiveGeneration, Finished
from .exchange import Exchange
from .job_events import KEEPALIVE, error_from, job_events

PREFILL_COMMENT = b": prefill\n\n"
LOADING_COMMENT = b": loading\n\n"     # the SSE dialects' load notice (loading.py)
DONE = b"data: [DONE]\n\n"
SSE_MEDIA_TYPE = "text/event-stream"

log = logging.getLogger("localserve.dialects")


def sse(data: object, event: str | None = None) -> bytes:
    payload = data if isinstance(data, bytes) else orjson.dumps(data)
    if event:
        return b"event: " + event.encode() + b"\ndata: " + payload + b"\n\n"
    return b"data: " + payload + b"\n\n"


class StreamShape(Protocol):
    """A dialect's stream without I/O; each dialect's shape subclasses it. A shape whose frames
    are not SSE (Ollama's NDJSON) names its own media type and load notice."""
    content_type: ClassVar[str] = SSE_MEDIA_TYPE

    @classmethod
    def loading_notice(cls) -> bytes | None:
        """What the stream says while its model loads, before there is a job (loading.py): its
        head goes out with the first, so the client hears something; None where the format has
        no comment line (NDJSON): silence."""
        return LOADING_COMMENT

    def feed(self, event: object) -> list[bytes]:
        """Frames for one event (a failed Finished goes to fail instead)."""

    def fail(self, error: ApiError) -> list[bytes]:
        """Frames for an error after the head went out, in the dialect's own error event."""

    def keepalive(self) -> list[bytes]:
        """Frames for a keepalive tick (a comment, or what is waiting to go out)."""

    def end(self) -> list[bytes]:
        """The frames that close the stream, after its last event."""

    @property
    def done(self) -> bool:
        """The stream is over before its source ends (a Responses run that reached its end)."""


def open_stream(exchange: Exchange, content_type: str = SSE_MEDIA_TYPE) -> None:
    """The stream's head, once: a load notice (loading.py) may have sent it before the handler
    knew its answer."""
    if not exchange.stream_open:
        exchange.writer.start_stream(content_type=content_type)
        exchange.stream_open = True


def open_stream_early(exchange: Exchange, content_type: str = SSE_MEDIA_TYPE) -> None:
    """The stream's head, sent before the handler knows its answer, to say something while it
    waits (a model load, a long decode, a compaction): whatever fails after it, until the
    stream ends, is an error in the stream (loading.serve_with_model), never a cut connection."""
    if not exchange.stream_open:
        open_stream(exchange, content_type)
        exchange.opened_early = True


class Job(Protocol):
    def cancel(self, reason: str) -> object: ...


def pump(exchange: Exchange, shape: StreamShape, source: Iterable[object], *, job: Job | None = None,
         idle: Callable[[], bool] = lambda: True) -> None:
    """Write `shape`'s frames for each event of `source` and end the stream. idle() says
    whether nothing more waits in the source: frames are buffered until it does, so several
    tokens go out in one write. A client gone cancels `job` (a follower has none)."""
    writer = exchange.writer
    buffer: list[bytes] = []
    try:
        open_stream(exchange, shape.content_type)
        for event in source:
            if event is KEEPALIVE:
                buffer += shape.keepalive()
            elif isinstance(event, Finished) and event.error is not None:
                buffer += shape.fail(error_from(event))
            else:
                buffer += shape.feed(event)
            last = isinstance(event, Finished) or shape.done
            if last:
                buffer += shape.end()
            if buffer and (last or event is KEEPALIVE or idle()):
                writer.stream(b"".join(buffer))
                buffer.clear()
            if last:
                break
        writer.end_stream()
    except ClientGone:
        if job is not None:
            job.cancel("client went away during the stream")
        raise
    except Exception as exc:
        if not exchange.stream_open or writer.finished:
            raise           # no head out: the router answers in the route's shape
        fail_in_band(exchange, shape, buffer, exc, job)


def fail_in_band(exchange: Exchange, shape: StreamShape, buffer: list[bytes], exc: Exception,
                 job: Job | None) -> None:
    """The stream failed after its head went out (a shape or a source raised): what came before
    goes out, then the dialect's own error event and the stream's end, as its API ends a stream
    that failed; the job stops. The traceback is logged here, once: nothing is raised on."""
    if isinstance(exc, ApiError):
        error = exc
        log.warning("%s %s (%s): the stream ended with an error: %s", exchange.request.method,
                    exchange.request.path, exchange.request_id, exc.message)
    else:
        log.exception("%s %s (%s): the stream failed after its head went out", exchange.request.method,
                      exchange.request.path, exchange.request_id)
        error = ApiError(500, "internal server error", code="server_error")
    try:
        frames = shape.fail(error) + shape.end()
    except Exception:            # the shape is what broke: the route's own error event, bare
        frames = [exchange.errors.stream_frame(error)]
    if job is not None:          # after the frames: a Responses run ends failed, not cancelled
        job.cancel(f"the stream failed: {error.message}")
    exchange.writer.stream(b"".join(buffer + frames))
    exchange.writer.end_stream()


def stream_job(exchange: Exchange, shape: StreamShape, gen: ActiveGeneration, keepalive: float,
               job: Job | None = None) -> None:
    """A live job's stream, `: prefill`-style keepalives every `keepalive` seconds until its first
    token; `job` (the generation itself unless given) is what a client gone cancels."""
    pump(exchange, shape, job_events(exchange.writer, gen, keepalive), job=job or gen, idle=gen.events.empty)
