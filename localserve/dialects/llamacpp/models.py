"""llama-server's router listing: GET /models and GET /models/sse.

GET /models is /v1/models (the router answers both alike): every model with its `status`
({"value": unloaded | loading | loaded | unloading, "failed"/"exit_code" after a load that
failed}) and `architecture.input_modalities`. GET /models/sse streams a `data:` line
`{"model", "event": "model_status", "data": {"status"}}` for each change of a model's state,
as llama-server's router does (Zed's llama.cpp provider listens to it and lists the models
again when one loads or unloads); while a model loads, `data.progress` says how far
(`{"stages", "current", "value"}`, models/load_progress.py). A stream sleeps on the models'
StateFeed until a change (nothing polls); a comment line every SSE_KEEPALIVE seconds of quiet;
a look at its socket every SSE_CLIENT_CHECK seconds (a client gone frees its thread); it ends
when the server stops. At most MAX_SSE_STREAMS are open at once, and at most
MAX_SSE_STREAMS_PER_CLIENT of them one client's (its API key from its address): one more is a
503 with Retry-After, so one client opening streams in a loop leaves the others theirs.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from functools import partial

from ...errors import ApiError, ClientGone
from ..exchange import Exchange, RouteTable
from ..job_events import KEEPALIVE
from ..models_and_health import list_models
from ..pump import StreamShape, open_stream, pump, sse
from ..services import Services
from .errors import LLAMA_ERRORS, llama_error_body

MAX_SSE_STREAMS = 64         # /models/sse streams open at once (each holds a connection thread)
MAX_SSE_STREAMS_PER_CLIENT = 8   # of them one client's: an editor or a page opens one or two
SSE_RETRY_AFTER = 5          # seconds, on the 503 past MAX_SSE_STREAMS
SSE_KEEPALIVE = 15.0         # seconds of quiet before a comment line (proxies drop silent streams)
SSE_CLIENT_CHECK = 2.0       # seconds of quiet between two looks at whether the client is still there
SSE_PULL_CHECK = 0.25        # seconds between two looks at the downloads' board while one runs


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/models", "GET", partial(list_models, services), errors=LLAMA_ERRORS)
    table.add("/models/sse", "GET", partial(models_sse, services, StreamCount(MAX_SSE_STREAMS)),
              errors=LLAMA_ERRORS)


class StreamCount:
    """The /models/sse streams open now, up to a limit in all and another per client."""

    def __init__(self, limit: int, per_client: int = MAX_SSE_STREAMS_PER_CLIENT):
        self.limit = limit
        self.per_client = per_client
        self.open = 0
        self.by_client: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, client: str) -> str | None:
        """None when the client may open one more; else why not."""
        with self._lock:
            if self.open >= self.limit:
                return f"{self.limit} /models/sse streams are open, the most this server keeps"
            if self.by_client.get(client, 0) >= self.per_client:
                return f"this client has {self.per_client} /models/sse streams open, the most one client may"
            self.open += 1
            self.by_client[client] = self.by_client.get(client, 0) + 1
            return None

    def give_back(self, client: str) -> None:
        with self._lock:
            self.open -= 1
            left = self.by_client.pop(client) - 1
            if left:
                self.by_client[client] = left


def client_of(exchange: Exchange) -> str:
    """Who opens a stream: the API key's scope (one per key) and the address it came from."""
    return f"{exchange.scope.owner}@{exchange.writer.peer_host()}"


def models_sse(services: Services, streams: StreamCount, exchange: Exchange) -> None:
    models = services.ready()
    if exchange.writer.head_only:
        open_stream(exchange)
        exchange.writer.end_stream()
        return
    client = client_of(exchange)
    refusal = streams.take(client)
    if refusal is not None:
        raise ApiError(503, f"{refusal}; close one or retry later", code="too_many_streams",
                       headers=[("Retry-After", str(SSE_RETRY_AFTER))])
    feed = models.changes

    def changes() -> Iterator[object]:
        since, quiet_since = feed.latest(), time.monotonic()
        board_seq, _ = services.pulls.since(0)       # POST /models' downloads from now on (llamacpp/downloads.py)
        while not services.stopping.is_set() and not feed.closed:
            wait = SSE_PULL_CHECK if services.pulls.running else SSE_CLIENT_CHECK
            news = feed.wait(since, min(wait, max(0.0, quiet_since + SSE_KEEPALIVE - time.monotonic())))
            if services.stopping.is_set():
                return
            for change in news:
                since = change.number + 1
                yield status_event(change.model, change.state, change.error, change.progress)
            board_seq, pulled = services.pulls.since(board_seq)
            yield from pulled
            if news or pulled:
                quiet_since = time.monotonic()
                continue
            if exchange.writer.peer_closed():
                raise ClientGone("the /models/sse client left")
            if time.monotonic() - quiet_since >= SSE_KEEPALIVE:
                quiet_since = time.monotonic()
                yield KEEPALIVE

    try:
        pump(exchange, StatusEvents(), changes())
    finally:
        streams.give_back(client)


def status_event(name: str, state: str, error: str | None, progress: dict | None = None) -> dict:
    data: dict = {"status": state}
    if state == "unloaded":     # llama-server's exit code: 0 after an unload, else the load failed
        data["exit_code"] = 1 if error else 0
        if error:
            data["error"] = error
    if progress is not None:
        data["progress"] = progress
    return {"model": name, "event": "model_status", "data": data}


class StatusEvents(StreamShape):
    """Model status changes → llama-server's `data:` lines."""
    done = False

    def feed(self, event: object) -> list[bytes]:
        return [sse(event)]

    def fail(self, error: ApiError) -> list[bytes]:
        return [sse(llama_error_body(error))]

    def keepalive(self) -> list[bytes]:
        return [b": keepalive\n\n"]

    def end(self) -> list[bytes]:
        return []
