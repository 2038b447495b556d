"""/completion with several prompts (`"prompt": ["a", "b"]`, `[[1, 2], [3]]`) or several choices
of each (`n_cmpl`), as llama-server answers it: each prompt's choice its own job, submitted
together so they share the model's batches (a prompt's choices its one prefill: choices.py); the
whole answer an array of completion objects in order (each with its `index`: prompt i's choice j
is i * n_cmpl + j), a stream one SSE stream whose lines carry their `index` (a job's lines in
order; the jobs one after the other: the later jobs' events wait in their queues meanwhile).

The request's other fields go with every prompt (id_slot too: the jobs then take that slot in
turn). A prompt that cannot be read is the request's 400 before any job runs; a job that fails
ends a stream with the error line, and the other jobs are cancelled; a client gone cancels them
all. An editor's FIM prompt among them keeps its priority, but a newer request from the same
editor does not supersede these.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

from ...errors import ApiError
from ...generation import ActiveGeneration, Finished
from ..exchange import Exchange
from ..failures import prompt_refusals
from ..fim import priority_client
from ..job_events import KEEPALIVE, cancel_on_error, error_from, job_events, submit, wait_for_output
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
        with ExitStack() as running:
            gens = []
            for final in finals:
                request = final.plan.request
                if request.editor_completion:     # editor priority is shared out per client (runtime/fairness.py)
                    request.client = priority_client(exchange)
                gen = submit(model, request, exchange.scope)
                running.enter_context(cancel_on_error(gen))
                gens.append(gen)
            try:
                if stream:
                    jobs = Jobs(gens)
                    pump(exchange, SeveralChunks([chunks(final) for final in finals]),
                         jobs.events(exchange, services.prefill_keepalive), job=jobs)
                else:
                    exchange.send_json([final.body(wait_for_output(exchange.writer, gen))
                                        for final, gen in zip(finals, gens)])
            finally:
                for gen in gens:        # after an error line: the jobs still running have no reader
                    gen.cancel("another prompt of the request failed")

    serve_with_model(exchange, models, body, serve, notice=LOADING_COMMENT if stream else None)


class Jobs:
    """The request's jobs, read one after the other as one stream of (index, event)."""

    def __init__(self, gens: list[ActiveGeneration]):
        self.gens = gens

    def events(self, exchange: Exchange, keepalive: float) -> Iterator[object]:
        for index, gen in enumerate(self.gens):
            for event in job_events(exchange.writer, gen, keepalive):
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
