"""The one request cycle of every endpoint that generates: the server ready, the body read, the
model it names loaded and held, the request read into a job, the job submitted, then a stream
or a whole answer; whatever fails once the job runs cancels it.

A dialect says only what is its own, as a Reply made once its model is there: the job's
request, its stream's shape, its whole answer's body (or, for a Responses run, its own way
to deliver the job).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..generation import ActiveGeneration, Finished, GenerationOutput, GenerationRequest
from ..prompt.media import decodes_run_by
from .choices import Choices, choice_events, submit_choices, wait_for_choices
from .exchange import Exchange
from .fields import read_bool
from .fim import priority_client, supersede_key, superseding
from .image_parts import report_omitted
from .job_events import cancel_on_error, submit, wait_for_output
from .loading import serve_with_model
from .media_wait import MediaWait
from .pump import PREFILL_COMMENT, StreamShape, pump, stream_job
from .services import Services
from .stored_defaults import StoredFields, put_stored

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ..models.served import ServedModel


@dataclass
class Reply:
    """A dialect's answer to one request, made before its job runs."""
    request: GenerationRequest
    shape: Callable[[ActiveGeneration | Choices], StreamShape] | None = None     # a stream's frames
    whole: Callable[[GenerationOutput], object] | None = None          # a whole answer's JSON body
    # A dialect's own delivery instead (a Responses run, stored as it goes): it returns a body to
    # send once the job is no longer this request's to cancel (a background run's opening), or None.
    deliver: Callable[[ActiveGeneration], object | None] | None = None
    # OpenAI's n: the request's choices, each a job of its own (choices.py); with more than one,
    # the stream's shape reads ChoiceEvents and choices_whole makes the whole answer of their ends
    choices: int = 1
    choices_whole: Callable[[list[Finished]], object] | None = None


def wants_stream(body: dict) -> bool:
    return read_bool(body, "stream")


def serve_generation(exchange: Exchange, services: Services, read: Callable[[ServedModel, dict], Reply],
                     streams: Callable[[dict], bool] = wants_stream,
                     shape_type: type[StreamShape] = StreamShape, body: dict | None = None,
                     stored: StoredFields | None = None) -> None:
    """read(model, body) → the Reply; the cycle runs around it. `streams(body)`: whether the
    client asked for a stream; `shape_type`: the class of the Reply's stream shape, whose
    loading_notice() such a stream hears while its model loads; `body`: the fields of a body
    that is no JSON (a multipart form: openai/transcriptions.py), else the JSON body is read;
    `stored`: where the dialect's body takes the model's stored defaults (stored_defaults.py)."""
    models = services.ready()
    body = exchange.json() if body is None else body
    stream = streams(body)
    # while a clip decodes, a stream whose format has comment lines says `: prefill` (media_wait.py)
    media_notice = PREFILL_COMMENT if stream and shape_type.loading_notice() is not None else None

    def serve(model: ServedModel) -> None:
        if stored is not None:
            put_stored(model.entry.defaults, body, stored)
        with decodes_run_by(MediaWait(exchange, media_notice, services.prefill_keepalive)):
            reply = read(model, body)
        report_omitted(exchange, reply.request.images_omitted,
                       reply.request.label or f"{exchange.request.path} {exchange.request_id}",
                       audio=reply.request.audio_omitted)
        if reply.request.editor_completion:     # editor priority is shared out per client (runtime/fairness.py)
            reply.request.client = priority_client(exchange)
        if reply.choices > 1:
            serve_choices(exchange, services, model, reply, stream)
            return
        gen = submit(model, reply.request, exchange.scope)
        handed_over = None
        # an editor's completion: a newer one from its client cancels it, and it cancels an older one
        with cancel_on_error(gen), superseding(supersede_key(exchange, reply.request), gen):
            if reply.deliver is not None:
                handed_over = reply.deliver(gen)
            elif stream:
                assert reply.shape is not None
                stream_job(exchange, reply.shape(gen), gen, services.prefill_keepalive)
            else:
                assert reply.whole is not None
                exchange.send_json(reply.whole(wait_for_output(exchange.writer, gen)))
        if handed_over is not None:
            exchange.send_json(handed_over)

    serve_with_model(exchange, models, body, serve, notice=shape_type.loading_notice() if stream else None)


def serve_choices(exchange: Exchange, services: Services, model: ServedModel, reply: Reply, stream: bool) -> None:
    """The request's choices (choices.py) where a single job would be: submitted together, one
    stream of them all or one whole answer; whatever fails cancels every one (a failed choice
    ends the stream early: the others are cancelled then too)."""
    choices = submit_choices(model, reply.request, reply.choices, exchange.scope)
    with cancel_on_error(choices), superseding(supersede_key(exchange, reply.request), choices):
        if stream:
            assert reply.shape is not None
            events = choice_events(exchange.writer, choices, services.prefill_keepalive)
            pump(exchange, reply.shape(choices), events, job=choices, idle=choices.events.empty)
            choices.cancel("another choice of the request failed")     # a flag: the choices that ended ignore it
        else:
            assert reply.choices_whole is not None
            exchange.send_json(reply.choices_whole(wait_for_choices(exchange.writer, choices)))
