"""llama-server's router listing: GET /models and GET /models/sse.

GET /models is /v1/models (the router answers both alike): every model with its `status`
({"value": unloaded | loading | loaded | unloading, "failed"/"exit_code" after a load that
failed}) and `architecture.input_modalities`. GET /models/sse streams a `data:` line
`{"model", "event": "model_status", "data": {"status"}}` each time a model's state changes,
as llama-server's router does (Zed's llama.cpp provider listens to it and lists the models
again when one loads or unloads); a comment line every SSE_KEEPALIVE seconds of quiet; it
ends when the server stops. A load reports no progress fraction: llama.cpp's load callback
is not wired here.
"""

from __future__ import annotations

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

SSE_POLL_INTERVAL = 0.25     # seconds between two looks at the models' states
SSE_KEEPALIVE = 15.0         # seconds of quiet before a comment line (proxies drop silent streams)


def add_routes(table: RouteTable, services: Services) -> None:
    table.add("/models", "GET", partial(list_models, services), errors=LLAMA_ERRORS)
    table.add("/models/sse", "GET", partial(models_sse, services), errors=LLAMA_ERRORS)


def models_sse(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    if exchange.writer.head_only:
        open_stream(exchange)
        exchange.writer.end_stream()
        return

    def states() -> dict[str, tuple]:
        return {record.name: (record.state, record.last_error) for record in models.all_models()}

    def changes() -> Iterator[object]:
        seen, quiet_since = states(), time.monotonic()
        while not services.stopping.wait(SSE_POLL_INTERVAL):
            if exchange.writer.peer_closed():
                raise ClientGone("the /models/sse client left")
            now = states()
            changed = [(name, state) for name, state in now.items() if seen.get(name) != state]
            seen = now
            for name, (state, error) in changed:
                yield status_event(name, state, error)
            if changed:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= SSE_KEEPALIVE:
                quiet_since = time.monotonic()
                yield KEEPALIVE

    pump(exchange, StatusEvents(), changes())


def status_event(name: str, state: str, error: str | None) -> dict:
    data: dict = {"status": state}
    if state == "unloaded":     # llama-server's exit code: 0 after an unload, else the load failed
        data["exit_code"] = 1 if error else 0
        if error:
            data["error"] = error
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
