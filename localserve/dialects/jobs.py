"""A job from a connection thread: submitting it, and waiting for a whole answer.

- submit: hand the request to the runtime; a full queue or a stopping server is a 503
  (failures.py maps the runtime's reasons to answers).
- wait_for_output: a non-streaming answer. Peeks at the socket every
  DISCONNECT_POLL_INTERVAL; a client that left cancels the job and gets nothing.
- cancel_on_error: whatever fails between submit and the job's end cancels the job.
Streams go through pump.py. Nothing here knows a wire format.
"""

from __future__ import annotations

import contextlib
import queue
import time

from ..errors import ApiError, ClientGone
from ..generation import ActiveGeneration, Finished, GenerationOutput, GenerationRequest
from .exchange import Exchange
from .failures import api_error, runtime_refusals
from ..settings import DISCONNECT_POLL_INTERVAL


def submit(exchange: Exchange, request: GenerationRequest) -> ActiveGeneration:
    """To the runtime of the model the request holds (exchange.model, set by ModelManager.use)."""
    model = exchange.model
    if model.embeddings_only:
        raise ApiError(400, f"model '{model.model_id}' serves embeddings only (an encoder, a reranker or "
                            f"embeddings-only): use /v1/embeddings or /v1/rerank", param="model",
                       code="model_not_supported")
    with runtime_refusals():
        return model.runtime.submit(request)


def error_from(finished: Finished) -> ApiError:
    """A failed job's answer (failures.py)."""
    return api_error(finished.error)


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


@contextlib.contextmanager
def cancel_on_error(gen: ActiveGeneration):
    """Around everything between submit and the job's end: whatever fails there cancels the job,
    so no job runs on with nobody to read it."""
    try:
        yield
    except BaseException as exc:
        gen.cancel(f"the request failed while its job ran ({type(exc).__name__})")
        raise
