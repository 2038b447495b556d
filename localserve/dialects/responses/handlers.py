"""OpenAI Responses: create (plain, streamed or in the background), retrieve (also as a
replayed or followed stream), cancel, delete, and list a response's input items.

Reading the request is request.py; shaping events is
stream.py; a response being generated is a runs.ResponseRun,
which stores it as it goes when `store` is on.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import stored_defaults
from ...errors import ApiError, ClientGone
from ...generation import ActiveGeneration, Finished, GenerationFailure
from ..exchange import Exchange
from ..fields import IGNORED_TOOLS_HEADER, ignored_tools_value, invalid
from ..job_events import KEEPALIVE, error_from, job_events
from ..pump import PREFILL_COMMENT, StreamShape, pump, sse, stream_job
from ..request_cycle import Reply, serve_generation
from ..services import Services
from .compaction_steps import compact_as_planned
from .errors import error_event
from .paging import list_page, read_page_query
from .request import Plan, read_plan
from .runs import ACTIVE, ResponseRun, ResponseRuns

if TYPE_CHECKING:        # the model itself: importing it would load llama.cpp on a connection thread
    from ...models.served import ServedModel
    from ...store.store import Store

log = logging.getLogger("localserve.responses")

FOLLOW_WAIT_SECONDS = 0.25
FOLLOW_KEEPALIVE = b": keepalive\n\n"
MAX_SEQUENCE_NUMBER = 2**63 - 1    # SQLite's largest integer: a larger starting_after can't be bound


def encode(events: list[dict]) -> bytes:
    return b"".join(sse(event, event["type"]) for event in events)


# ---- POST /v1/responses ----------------------------------------------------------------

def create(responses: ResponsesServices, exchange: Exchange) -> None:
    serve_generation(exchange, responses.services, lambda model, body: read_reply(responses, exchange, body, model),
                     streams=lambda body: body.get("stream") is True, stored=stored_defaults.RESPONSES)


def read_reply(responses: ResponsesServices, exchange: Exchange, body: dict, model: ServedModel) -> Reply:
    services = responses.services
    plan = read_plan(body, exchange.request_id, chat_model=model.chat, model_id=model.model_id,
                     signing_key=services.signing_key_for(exchange.scope), store=services.store_for(exchange.scope),
                     check_client=exchange.raise_if_gone)
    if plan.ignored_tools:
        ignored = ignored_tools_value(plan.ignored_tools)
        log.info("responses %s: hosted tools left out (they cannot run here): %s", exchange.request_id, ignored)
        exchange.writer.extra_headers.append((IGNORED_TOOLS_HEADER, ignored))
    compact_as_planned(exchange, model, plan, services.signing_key_for(exchange.scope),
                       services.settings.compact_max_tokens, services.prefill_keepalive)
    return Reply(plan.generation, deliver=lambda gen: deliver(responses, exchange, plan, gen))


def deliver(responses: ResponsesServices, exchange: Exchange, plan: Plan, gen: ActiveGeneration) -> dict | None:
    """The job as a run, stored as it goes when `store` is on: in the background (its opening
    answered once the runner thread owns it: a client gone then stops nothing), streamed, or
    waited for whole."""
    runs = responses.runs
    run = ResponseRun(plan, gen, responses.services.store_for(exchange.scope), exchange.scope.owner)
    opening = run.begin()
    if plan.store:
        runs.add(run)
    handed_over = False
    try:
        if plan.background:
            runs.start_background(run)
            handed_over = True
        elif plan.stream:
            stream_run(exchange, run, responses.services.prefill_keepalive)
        else:
            answer(exchange, run)
    except BaseException:
        run.interrupt("the response failed while it was being generated")   # stored so, unless it ended
        raise
    finally:
        if not handed_over:
            runs.discard(run)
    return opening[0]["response"] if plan.background else None


def answer(exchange: Exchange, run: ResponseRun) -> None:
    """Wait for the whole response; a client that leaves cancels it."""
    try:
        for event in job_events(exchange.writer, run.gen, 0):
            run.feed(event)
            if run.done:
                break
    except ClientGone:
        run.cancel("client closed the connection while waiting")
        raise
    if run.error_event is not None:
        raise error_from(run.error_event)
    exchange.send_json(run.shaper.snapshot())


class RunStream(StreamShape):
    """A run's Responses events as frames: the run shapes and stores them (another thread may
    add some: a cancel), this sends each once, in order."""

    def __init__(self, run: ResponseRun):
        self.run = run
        self.sent = 0

    @property
    def done(self) -> bool:
        return self.run.done

    def pending(self) -> list[bytes]:
        events = self.run.events[self.sent:]
        self.sent += len(events)
        return [encode(events)] if events else []

    def feed(self, event: object) -> list[bytes]:
        self.run.feed(event)
        return self.pending()

    def fail(self, error: ApiError) -> list[bytes]:
        # response.failed, the Responses in-band error (stored with the response)
        self.run.feed(Finished(error=GenerationFailure(error.message)))     # the run keeps its message
        return self.pending()

    def keepalive(self) -> list[bytes]:
        return self.pending() or [PREFILL_COMMENT]

    def end(self) -> list[bytes]:
        return self.pending()


class Replay(StreamShape):
    """Stored events, batch by batch, as they are read or followed."""
    done = False

    def __init__(self, after: int = -1):
        self.next_number = after + 1

    def feed(self, events: object) -> list[bytes]:
        if events:
            self.next_number = events[-1]["sequence_number"] + 1     # type: ignore[index]
        return [encode(events)]            # type: ignore[arg-type]

    def fail(self, error: ApiError) -> list[bytes]:
        # reading the store or following the run failed: the stream's error event, numbered on
        return [sse({**error_event(error), "sequence_number": self.next_number}, "error")]

    def keepalive(self) -> list[bytes]:
        return [FOLLOW_KEEPALIVE]

    def end(self) -> list[bytes]:
        return []


def stream_run(exchange: Exchange, run: ResponseRun, keepalive: float) -> None:
    """The run's events as SSE while it generates; a client gone cancels it. What fails once the
    run's events are going out ends the stream with the run's own response.failed, numbered on
    from them and stored so (RunStream.fail, through the pump), not with an error event of its
    own numbering (errors.py)."""
    stream_job(exchange, RunStream(run), run.gen, keepalive, job=run)


# ---- GET /v1/responses/{response_id} ----------------------------------------------------

def retrieve(responses: ResponsesServices, exchange: Exchange) -> None:
    store = stored_state(responses, exchange)
    response_id = exchange.params["response_id"]
    query = exchange.request.query
    if read_flag(query, "stream"):
        replay(responses, exchange, store, response_id, read_starting_after(query))
        return
    response = store.get_response(response_id)
    if response is None:
        raise not_found(response_id)
    exchange.send_json(response)


def replay(responses: ResponsesServices, exchange: Exchange, store: Store, response_id: str, after: int) -> None:
    """Stored events after `after`; a response still running is followed live to its end."""
    writer = exchange.writer
    run = responses.runs.get(response_id, exchange.scope.owner)
    if run is None:
        if store.get_response(response_id) is None:
            raise not_found(response_id)
        pump(exchange, Replay(after), [store.events(response_id, starting_after=after)])
    elif writer.head_only:        # the head is all a HEAD asks for: don't follow the run
        pump(exchange, Replay(), [])
    else:
        pump(exchange, Replay(after), follow(exchange, run, after, responses.services.prefill_keepalive or 5.0))


def follow(exchange: Exchange, run: ResponseRun, after: int, keepalive: float) -> Iterator[object]:
    """A running response's events after `after`, in batches, to its end; KEEPALIVE when the
    run is quiet for `keepalive` seconds. A follower owns no job: leaving stops nothing."""
    last_write = time.monotonic()
    while True:
        events, done = run.follow(after, FOLLOW_WAIT_SECONDS)
        if events:
            yield events
            after = events[-1]["sequence_number"]
            last_write = time.monotonic()
        elif done:
            return
        elif exchange.writer.peer_closed():
            raise ClientGone("peer closed while following a response")
        elif time.monotonic() - last_write >= keepalive:
            yield KEEPALIVE
            last_write = time.monotonic()


# ---- POST /v1/responses/{response_id}/cancel -----------------------------------------------

def cancel(responses: ResponsesServices, exchange: Exchange) -> None:
    store = stored_state(responses, exchange)
    response_id = exchange.params["response_id"]
    run = responses.runs.get(response_id, exchange.scope.owner)
    if run is not None and run.cancel(f"cancelled through POST /v1/responses/{response_id}/cancel"):
        exchange.send_json(store.get_response(response_id) or run.shaper.snapshot())
        return
    response = store.get_response(response_id)
    if response is None:
        raise not_found(response_id)
    status = response["status"]
    if status in ACTIVE:        # no run behind it (it is just ending): the store decides
        store.set_status(response_id, "cancelled", only_if_in=ACTIVE)
        response = store.get_response(response_id) or response
        status = response["status"]
    if status not in ("cancelled",):
        code = "response_already_failed" if status == "failed" else "response_already_completed"
        raise ApiError(400, f"response '{response_id}' has already finished ({status}); only a queued or "
                            f"in-progress response can be cancelled", code=code)
    exchange.send_json(response)


# ---- DELETE /v1/responses/{response_id} ----------------------------------------------------

def delete(responses: ResponsesServices, exchange: Exchange) -> None:
    store = stored_state(responses, exchange)
    response_id = exchange.params["response_id"]
    run = responses.runs.get(response_id, exchange.scope.owner)
    if run is not None:
        run.cancel("the response was deleted")
    if not store.delete_response(response_id):
        raise not_found(response_id)
    exchange.send_json({"id": response_id, "object": "response.deleted", "deleted": True})


# ---- GET /v1/responses/{response_id}/input_items ----------------------------------------

def input_items(responses: ResponsesServices, exchange: Exchange) -> None:
    store = stored_state(responses, exchange)
    response_id = exchange.params["response_id"]
    after, limit, order = read_page_query(exchange.request.query)
    page = store.list_input_items(response_id, after=after, limit=limit, order=order)
    if page is None:
        raise not_found(response_id)
    exchange.send_json(list_page(*page))


# ---- helpers ---------------------------------------------------------------------------------

@dataclass
class ResponsesServices:
    """What the Responses handlers use: the server's services and the runs in progress."""
    services: Services
    runs: ResponseRuns


def stored_state(responses: ResponsesServices, exchange: Exchange) -> Store:
    """The store as the request's key sees it; with storage off no response can be found."""
    store = responses.services.store_for(exchange.scope)
    if store is None:
        raise ApiError(404, f"response '{exchange.params.get('response_id')}' not found: storage is off on "
                            f"this server (--no-store), so no response is kept", code="storage_disabled")
    return store


def not_found(response_id: str) -> ApiError:
    return ApiError(404, f"response '{response_id}' not found", param="response_id", code="response_not_found")


def read_flag(query: dict[str, str], name: str) -> bool:
    value = query.get(name, "false").lower()
    if value not in ("true", "false", "1", "0"):
        raise invalid(name, f"expected true or false, got '{value}'")
    return value in ("true", "1")


def read_starting_after(query: dict[str, str]) -> int:
    raw = query.get("starting_after")
    if raw is None or raw == "":
        return -1
    try:
        value = int(raw)
    except ValueError:
        raise invalid("starting_after", f"expected an integer, got '{raw}'") from None
    if value < -1:
        raise invalid("starting_after", "must be at least -1")
    if value > MAX_SEQUENCE_NUMBER:
        raise invalid("starting_after", f"must be at most {MAX_SEQUENCE_NUMBER}")
    return value
