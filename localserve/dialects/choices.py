"""A request's several choices (OpenAI's `n`): read, fanned out into sibling jobs, read back.

The choices are n jobs of one prompt in one choice group (GenerationRequest.choice_group): the
runtime computes the prompt once and copies it into the others (runtime/placement.waits_for).
Each has its own sampler seed, seed + i when the request gives one, so a run repeats (without
one, each draws its own). They are queued together or not at all, and choices beyond the slots
wait for one, as any job does; a request that could never be queued whole is a 400 naming `n`.
Their events come on one queue as ChoiceEvents. A client gone cancels them all, and so does a
choice that fails: the request fails with its error, in the dialect's error shape (a whole
answer's status, or the stream's error event once the stream is open), as a single choice's
would. OpenAI's choices have no error of their own: a finish_reason "error" is one the SDKs'
types refuse, so the choices that went well would be lost to the client anyway.
"""

from __future__ import annotations

import copy
import dataclasses
import queue
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..errors import ClientGone
from ..generation import ActiveGeneration, ChoiceEvent, Finished, GenerationRequest
from .exchange import Scope, Writer
from .fields import invalid, read_int
from .job_events import error_from, queue_events, submit_all
from .limits import MAX_CHOICES

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ..models.served import ServedModel


def read_choices(body: dict, model: ServedModel, param: str = "n") -> int:
    """How many choices the request asks for (1 to MAX_CHOICES), within what the model's runtime
    can ever hold at once: its slots and its queue."""
    n = read_int(body, param, low=1, high=MAX_CHOICES, default=1)
    check_room(n, model, param)
    return n


def check_room(n: int, model: ServedModel, param: str) -> None:
    """A 400 naming `param` when n jobs could never be queued together on this model."""
    if n > model.settings.slots + model.settings.max_queue:
        raise invalid(param, f"is {n}: each choice is a sequence of its own, and this model runs "
                             f"{model.settings.slots} at once (--slots) with {model.settings.max_queue} "
                             f"queued (--max-queue)")


def refuse_choices(body: dict, message: str) -> None:
    """A dialect without `n` (Anthropic's Messages, OpenAI's Responses): several choices refused,
    as those APIs refuse the field (`message`: theirs); a single one is what it answers anyway."""
    if body.get("n") not in (None, 1):
        raise invalid("n", message)


def choice_requests(request: GenerationRequest, n: int) -> list[GenerationRequest]:
    """The request's n choices: one prompt, one group, seed + i each (None stays None: each
    sampler then draws its own seed)."""
    group = uuid.uuid4().hex
    seed = request.sampling.seed
    choices = []
    for i in range(n):
        choice = copy.copy(request)
        choice.sampling = dataclasses.replace(request.sampling, seed=None if seed is None else seed + i)
        choice.choice_group = group
        choices.append(choice)
    return choices


class Choices:
    """The jobs of one request's choices, cancelled together (what pump and cancel_on_error cancel)."""

    def __init__(self, gens: list[ActiveGeneration], events: queue.SimpleQueue):
        self.gens = gens
        self.events = events

    def cancel(self, reason: str) -> None:
        for gen in self.gens:
            gen.cancel(reason)

    @property
    def cancelled(self) -> bool:
        return all(gen.cancelled for gen in self.gens)


def submit_choices(model: ServedModel, request: GenerationRequest, n: int, scope: Scope) -> Choices:
    events: queue.SimpleQueue = queue.SimpleQueue()
    return Choices(submit_all(model, choice_requests(request, n), scope, events), events)


def choice_events(writer: Writer, choices: Choices, keepalive: float) -> Iterator[object]:
    """Every choice's events as ChoiceEvents (and KEEPALIVE), up to the last choice's Finished."""
    left = set(range(len(choices.gens)))

    def last(event: object) -> bool:
        if isinstance(event, ChoiceEvent) and isinstance(event.event, Finished):
            left.discard(event.index)
        return not left

    return queue_events(writer, choices.events, keepalive, last)


def wait_for_choices(writer: Writer, choices: Choices) -> list[Finished]:
    """Every choice's Finished, in index order; the error of the first to fail, once it fails
    (the caller's cancel_on_error cancels the others). A client that left cancels them all
    (ClientGone)."""
    ends: dict[int, Finished] = {}
    try:
        for event in choice_events(writer, choices, 0):
            if isinstance(event, ChoiceEvent) and isinstance(event.event, Finished):
                if event.event.error is not None:
                    raise error_from(event.event)
                ends[event.index] = event.event
    except ClientGone:
        choices.cancel("client closed the connection while waiting")
        raise
    return [ends[i] for i in range(len(choices.gens))]
