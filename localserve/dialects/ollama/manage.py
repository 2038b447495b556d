"""POST /api/pull, /api/push, /api/create, /api/copy and DELETE /api/delete.

A pull of a model the catalogue has succeeds at once (streamed as Ollama streams its
progress, unless `stream` is false), so clients that pull before they chat work unchanged;
but a Hub repo's bare name (`hf.co/org/repo`) asks the Hub which quant is the repo's default,
as Ollama does, and pulls that one when the quant the name serves is another.
A pull of a Hub name (`hf.co/org/repo:quant`, `org/repo:quant`) fetches it from the Hugging
Face Hub, or $HF_ENDPOINT, into the Hugging Face cache (models/hub/), then serves it: Ollama's
progress lines (`pulling manifest`, `pulling <digest>` with `digest`, `total`, `completed`,
`verifying sha256 digest`, `writing manifest`, `success`). A bad name, a repo or quant not
there, a gated repo are errors before the stream; a failure during it is an `{"error"}` line.
A client that leaves stops the download (once no other pull wants the file; the partial file
is kept for the next pull). Ollama's own registry is not reached; push, create and copy are a
clear 400. So is delete, touching nothing: a model found in another tool's store is that tool's
to remove (the answer names how), and a pulled one lives in the Hugging Face cache that other
tools share and may be using it (`hf cache delete` removes it there).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import cast

import orjson

from ...errors import ApiError, ClientGone, shown
from ...models.hub.errors import HubError
from ...models.hub.names import is_hub_name
from ...models.hub.pull import Progress
from ..exchange import Exchange
from ..fields import read_bool
from ..pulls import api_error, asks_for_the_default, prepare, progress
from ..pump import StreamShape, pump
from ..services import Services
from .errors import ollama_error_body
from .names import not_found, requested_name

NDJSON = "application/x-ndjson"
LOCAL_ONLY = ("this server (localserve) makes no models of its own: it serves files, other tools' stores and "
              "pulls from the Hub")
HUB_ONLY = ("it pulls from the Hugging Face Hub only (hf.co/org/repo[:quant]), never from Ollama's registry")


def pull(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    body = exchange.json()
    name = requested_name(body)
    stream = read_bool(body, "stream", default=True)
    served = models.catalogue.exact(name)
    if served is not None and not asks_for_the_default(name, served):
        done = [{"status": "pulling manifest"}, {"status": "success"}]
        send_whole(exchange, done, stream)
        return
    if not is_hub_name(name):
        raise ApiError(404, f"model '{shown(name)}' is not in the catalogue and {HUB_ONLY} "
                            f"(it serves {', '.join(models.catalogue.names())})", code="model_not_found")
    events = progress(prepare(name), models)
    try:
        if stream:
            pump(exchange, PullLines(), hub_failures(events))
            return
        with hub_refusals():
            for _ in events:
                if exchange.writer.peer_closed():
                    raise ClientGone("the /api/pull client left")
        exchange.send_json({"status": "success"})
    finally:
        events.close()


@contextlib.contextmanager
def hub_refusals():
    """Around a pull's progress: the Hub's errors, and a cache that cannot be written, as answers."""
    try:
        yield
    except HubError as exc:
        raise api_error(exc) from None
    except OSError as exc:
        raise ApiError(500, f"the pull failed writing the cache: {exc.strerror or exc}", code="pull_failed") from None


def hub_failures(events: Iterator[Progress]) -> Iterator[Progress]:
    """The progress, its failures as answers: the stream's `{"error"}` line (the pump's)."""
    with hub_refusals():
        yield from events


class PullLines(StreamShape):
    """A pull's progress → Ollama's NDJSON status lines; a failure, its `{"error"}` line."""
    done = False
    content_type = NDJSON

    @classmethod
    def loading_notice(cls) -> None:
        return None

    def feed(self, event: object) -> list[bytes]:
        step = cast(Progress, event)
        line: dict = {"status": step.status}
        if step.digest is not None:
            line.update(digest=step.digest, total=step.total, completed=step.completed)
        return [orjson.dumps(line) + b"\n"]

    def fail(self, error: ApiError) -> list[bytes]:
        return [orjson.dumps(ollama_error_body(error)) + b"\n"]

    def keepalive(self) -> list[bytes]:
        return []

    def end(self) -> list[bytes]:
        return []


def send_whole(exchange: Exchange, statuses: list[dict], stream: bool) -> None:
    if stream:
        exchange.writer.send(200, b"".join(orjson.dumps(s) + b"\n" for s in statuses), content_type=NDJSON)
    else:
        exchange.send_json(statuses[-1])


def refused(action: str, services: Services, exchange: Exchange) -> None:
    """A write (`action`: push, create, copy): this server does none."""
    services.ready()
    raise ApiError(400, f"{action} is not available: {LOCAL_ONLY}", code="not_supported")


# How each store's own tool removes a model (discovery's sources, and the configured ones)
REMOVED_BY = {
    "ollama": "it is in Ollama's store, which this server only reads: remove it with `ollama rm {name}`",
    "hf-cache": "it is in the Hugging Face cache, which other tools share: remove it with `hf cache delete` "
                "(huggingface_hub's CLI)",
    "lmstudio": "it is in LM Studio's models folder, which this server only reads: remove it in LM Studio",
    "llamacpp-cache": "it is in llama.cpp's download cache, which this server only reads: remove its files there",
}


def delete(services: Services, exchange: Exchange) -> None:
    models = services.ready()
    name = requested_name(exchange.json())
    entry = models.catalogue.exact(name)
    if entry is None:
        raise not_found(name)           # Ollama's 404 for a name not there
    why = REMOVED_BY.get(entry.source, "remove it from the configuration instead").format(name=entry.name)
    raise ApiError(400, f"model '{shown(name)}' was not deleted: {why}", code="not_supported")
