"""/completion with several prompts (`"prompt": ["a", "b"]`, `[[1, 2], [3]]`) or several choices
of each (`n_cmpl`), as llama-server answers it: each prompt's choice its own job, submitted
together so they share the model's batches (a prompt's choices its one prefill: choices.py); the
whole answer an array of completion objects in order (each with its `index`: prompt i's choice j
is i * n_cmpl + j), a stream one SSE stream whose lines carry their `index` (a job's lines in
order; the jobs one after the other: the later jobs' events wait in their queues meanwhile).

The request's other fields go with every prompt (id_slot too: the jobs then take that slot in
turn). The jobs go to the model's queue a window at a time (PROMPTS_IN_QUEUE_PER_SLOT for each
of the model's slots): the next is submitted as the oldest is read whole. All at once, 64 of them
sat in the queue before any other client's request, which waited behind every one (a 3-token
chat took 21 s behind 64 prompts of 400 tokens on two slots); now another request waits behind
one window (a choice submitted later copies the prompt its siblings computed, as a waiting one
does). A later job that finds the queue full waits for a place while the client is there. A prompt that cannot be read is the request's 400 before any job runs; a job that fails
ends a stream with the error line, and the other jobs are cancelled; a client gone cancels them
all. An editor's FIM prompt among them keeps its priority, but a newer request from the same
editor does not supersede these.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ...errors import ApiError, ClientGone
from ...generation import ActiveGeneration, Finished, GenerationRequest
from ...settings import DISCONNECT_POLL_INTERVAL
from ..exchange import Exchange, Scope, Writer
from ..failures import prompt_refusals
from ..fim import priority_client
from ..job_events import KEEPALIVE, error_from, job_events, submit, wait_for_output
from ..loading import serve_with_model
from ..infill import InfillFinal
from ..pump import LOADING_COMMENT, PREFILL_COMMENT, StreamShape, pump, sse
from ..request_cycle import wants_stream
from ..services import Services
from .errors import llama_error_body

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.served import ServedModel

# (the model, the request's body, one prompt, its index, its label) → its completion objects'
# makers: one per choice (n_cmpl), each a job
ReadOne = Callable[["ServedModel", dict, Any, int, str], list[InfillFinal]]
PROMPTS_IN_QUEUE_PER_SLOT = 2    # one request's jobs submitted at once, per slot: each slot busy, the next ready
QUEUE_FULL = "server_overloaded"     # failures.py's code for QueueFull


def serve_several(services: Services, exchange: Exchange, prompts: list[Any], read: ReadOne,
                  chunks: Callable[[InfillFinal], StreamShape]) -> None:
    """Each prompt read by `read` into its completion object's maker, whose stream `chunks` shapes."""
    models = services.ready()
    body = exchange.json()
    stream = wants_stream(body)

    def serve(model: ServedModel) -> None:
        finals = []
        for index, prompt in enumerate(prompts):
            with prompt_refusals("prompt"):
                finals += read(model, body, prompt, index, f"{exchange.request_id}/{index}")
        for final in finals:
            if final.plan.request.editor_completion:     # editor priority is shared out per client (runtime/fairness.py)
                final.plan.request.client = priority_client(exchange)
        window = min(model.settings.slots * PROMPTS_IN_QUEUE_PER_SLOT, model.settings.max_queue)
        jobs = Jobs(model, [final.plan.request for final in finals], exchange.scope, window)
        try:
            jobs.submit_window(exchange.writer)          # a full queue is the request's 503, before any line
            if stream:
                pump(exchange, SeveralChunks([chunks(final) for final in finals]),
                     jobs.events(exchange, services.prefill_keepalive), job=jobs)
            else:
                exchange.send_json([final.body(wait_for_output(exchange.writer, jobs.gen(index, exchange.writer)))
                                    for index, final in enumerate(finals)])
        finally:
            jobs.cancel("another prompt of the request failed")   # after an error: the jobs still running have no reader

    serve_with_model(exchange, models, body, serve, notice=LOADING_COMMENT if stream else None)


class Jobs:
    """The request's jobs: submitted `window` at a time, read one after the other (as one stream
    of (index, event)); job i + window goes in once job i has been read."""

    def __init__(self, model: ServedModel, requests: list[GenerationRequest], scope: Scope, window: int):
        self.model = model
        self.requests = requests
        self.scope = scope
        self.window = max(1, window)
        self.gens: list[ActiveGeneration] = []

    def submit_window(self, writer: Writer) -> None:
        self.gen(0, writer)

    def gen(self, index: int, writer: Writer) -> ActiveGeneration:
        """Job `index`, with the jobs up to a window past it submitted."""
        while len(self.gens) < min(index + self.window, len(self.requests)):
            self.gens.append(self._submit(self.requests[len(self.gens)], writer))
        return self.gens[index]

    def _submit(self, request: GenerationRequest, writer: Writer) -> ActiveGeneration:
        """A job in the queue; while it is full, a later job waits for a place (the first is a 503)."""
        while True:
            try:
                return submit(self.model, request, self.scope)
            except ApiError as error:
                if error.code != QUEUE_FULL or not self.gens:
                    raise
            time.sleep(DISCONNECT_POLL_INTERVAL)
            if writer.peer_closed():
                raise ClientGone("peer closed while its next prompt waited for a place in the queue")

    def events(self, exchange: Exchange, keepalive: float) -> Iterator[object]:
        for index in range(len(self.requests)):
            for event in job_events(exchange.writer, self.gen(index, exchange.writer), keepalive):
                yield event if event is KEEPALIVE else (index, event)

    def cancel(self, reason: str) -> None:
        for gen in self.gens:
            gen.cancel(reason)


class SeveralChunks(StreamShape):
    """(index, runtime event) → each prompt's /completion lines; done once every prompt's last
    object went out, or one failed."""

    def __init__(self, shapes: list[StreamShape]):
        self.shapes = shapes
        self.finished = 0
        self.failed = False

    @property
    def done(self) -> bool:
        return self.failed or self.finished == len(self.shapes)

    def feed(self, event: object) -> list[bytes]:
        index, inner = event
        if isinstance(inner, Finished):
            if inner.error is not None:
                return self.fail(error_from(inner))
            self.finished += 1
        return self.shapes[index].feed(inner)

    def fail(self, error: ApiError) -> list[bytes]:
        self.failed = True
        return [sse(llama_error_body(error))]

    def keepalive(self) -> list[bytes]:
        return [PREFILL_COMMENT]

    def end(self) -> list[bytes]:
        return []
