"""A job as a connection thread sees it: submitting it, reading its events, waiting for its end.

- submit: hand the request to the runtime of the model the request holds, in the prompt-cache
  scope of the key that sent it; a full queue or a stopping server is a 503 (failures.py maps
  the runtime's reasons to answers).
- job_events: the one wait loop. The job's events as they come, KEEPALIVE while nothing has
  been generated, and a peek at the socket every DISCONNECT_POLL_INTERVAL by the clock, not
  only when the queue goes quiet (a fast decode never lets it): a client that left is
  ClientGone. Streams (pump.py) and whole answers read it alike; a request's choices read the
  queue they share through the same loop (queue_events; choices.py).
- wait_for_output: a whole answer; a client that left cancels the job and gets nothing.
- cancel_on_error: whatever fails between submit and the job's end cancels the job.
Nothing here knows a wire format.
"""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import ApiError, ClientGone
from ..generation import (ActiveGeneration, ChoiceEvent, Chunk, Finished, GenerationOutput, GenerationRequest,
                          ToolCallDelta, ToolCallStart, cache_scope)
from ..settings import DISCONNECT_POLL_INTERVAL
from .exchange import Scope, Writer
from .failures import api_error, refusals

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ..models.served import ServedModel

KEEPALIVE = object()   # yielded by a source: time for a keepalive (pump.py)


def submit(model: ServedModel, request: GenerationRequest, scope: Scope) -> ActiveGeneration:
    """To the runtime of `model`, the one the request holds (loading.serve_with_model); `scope`:
    the exchange's, whose prompt caches the job may use (exchange.Scope), narrowed to the job's
    LoRA adapter set (a 400 when its `lora` asks for one the model cannot run)."""
    return submit_all(model, [request], scope)[0]


def submit_all(model: ServedModel, requests: list[GenerationRequest], scope: Scope,
               events: queue.SimpleQueue | None = None) -> list[ActiveGeneration]:
    """submit() for several jobs at once (a request's choices: choices.py): queued together or
    not at all; with `events`, their events on that one queue."""
    if model.embeddings_only:
        raise ApiError(400, f"model '{model.model_id}' serves embeddings only (an encoder, a reranker or "
                            f"embeddings-only): use /v1/embeddings or /v1/rerank", param="model",
                       code="model_not_supported")
    with refusals():
        for request in requests:
            request.adapters = model.adapter_set(request.sampling.lora)
            request.scope = cache_scope(scope.cache, request.adapters)
        return model.submit_all(requests, events)


def error_from(finished: Finished) -> ApiError:
    """A failed job's answer (failures.py)."""
    return api_error(finished.error)


def job_events(writer: Writer, gen: ActiveGeneration, keepalive: float) -> Iterator[object]:
    """The job's events up to its Finished; KEEPALIVE every `keepalive` seconds while nothing has
    been generated yet (0: never). Raises ClientGone when the socket closes."""
    return queue_events(writer, gen.events, keepalive, lambda event: isinstance(event, Finished))


def queue_events(writer: Writer, events: queue.SimpleQueue, keepalive: float,
                 last: Callable[[object], bool]) -> Iterator[object]:
    """job_events' loop over any queue of events (a request's choices share one: choices.py),
    up to the event last() says ends it."""
    started = False
    next_peek = time.monotonic() + DISCONNECT_POLL_INTERVAL
    next_keepalive = time.monotonic() + keepalive if keepalive > 0 else None
    while True:
        try:
            event = events.get(timeout=DISCONNECT_POLL_INTERVAL)
        except queue.Empty:
            event = None
        if time.monotonic() >= next_peek:
            next_peek = time.monotonic() + DISCONNECT_POLL_INTERVAL
            if writer.peer_closed():
                raise ClientGone("peer closed")
        if event is None:
            if not started and next_keepalive is not None and time.monotonic() >= next_keepalive:
                next_keepalive = time.monotonic() + keepalive
                yield KEEPALIVE
            continue
        payload = event.event if isinstance(event, ChoiceEvent) else event
        if isinstance(payload, (Chunk, ToolCallStart, ToolCallDelta)):
            started = True
        yield event
        if last(event):
            return


def wait_for_output(writer: Writer, gen: ActiveGeneration) -> GenerationOutput:
    """Block until the job finishes; raises ClientGone (job cancelled) or ApiError."""
    try:
        for event in job_events(writer, gen, 0):
            if isinstance(event, Finished):
                if event.error is not None:
                    raise error_from(event)
                return event.output
    except ClientGone:
        gen.cancel("client closed the connection while waiting")
        raise
    raise AssertionError("job_events ends with the job's Finished")


@contextlib.contextmanager
def cancel_on_error(gen: ActiveGeneration):
    """Around everything between submit and the job's end: whatever fails there cancels the job,
    so no job runs on with nobody to read it."""
    try:
        yield
    except BaseException as exc:
        gen.cancel(f"the request failed while its job ran ({type(exc).__name__})")
        raise
