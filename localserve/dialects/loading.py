"""A model load as a client sees it.

models/ only says that a request's model is loading (a Loading event, now and then, while
the request waits); what the client sees is the dialect's. A stream's dialect passes its load
notice (the SSE dialects: a `: loading` comment): the head goes out with it as the wait
starts, and the notice again every LOADING_COMMENT_INTERVAL. An error after that head (the
load failed, or the request turned out bad once the model was there) goes in-band, in the
route's error shape, and ends the stream. Without a notice (a whole answer; NDJSON has no
comments) the client sees nothing. Either way the socket is watched: a client that left
ends the wait (ClientGone).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from ..errors import ApiError, ClientGone
from ..generation import Loading
from .exchange import Exchange
from .failures import refusals
from .fields import read_num_ctx
from .pump import open_stream_early

if TYPE_CHECKING:        # the models themselves: importing them would load llama.cpp on a connection thread
    from ..models.served import ServedModel
    from ..models.manager import ModelManager

LOADING_COMMENT_INTERVAL = 1.0     # seconds between ": loading" SSE comments while a stream's model loads

log = logging.getLogger("localserve.routes")


class LoadWait:
    """One request's wait for its model (ModelManager.use's on_loading)."""

    def __init__(self, exchange: Exchange, notice: bytes | None = None):
        self.exchange = exchange
        self.notice = notice
        self.opened = False          # the head went out here, with the notice
        self.next_notice = 0.0

    def __call__(self, event: Loading) -> None:
        writer = self.exchange.writer
        if self.notice is not None and not self.opened:
            open_stream_early(self.exchange)
            self.opened = True
        elif writer.peer_closed():
            raise ClientGone(f"peer closed while model {event.model} loaded")
        if self.notice is not None and time.monotonic() >= self.next_notice:
            writer.stream(self.notice)
            self.next_notice = time.monotonic() + LOADING_COMMENT_INTERVAL


@contextlib.contextmanager
def use_model(models: ModelManager, body: dict, on_loading: Callable[[Loading], None] | None = None
              ) -> Iterator[ServedModel]:
    """`with use_model(models, body, wait) as model:` the model the body's `model` names (404
    model_not_found otherwise), loaded, held while the request runs; on_loading hears the load;
    the body's `keep_alive` (Ollama's) is how long it stays loaded after this request, its
    `num_ctx` (Ollama's, in `options` or beside the other fields) the context it needs. What the
    manager refuses is the answer failures.py gives it. A name `base+adapter` is the base model
    running that LoRA adapter (models/adapter_files.py): answers carry that name."""
    n_ctx = read_num_ctx(body)
    name = body.get("model")
    with refusals(), models.use(name, keep_alive=body.get("keep_alive"), n_ctx=n_ctx,
                                      on_loading=on_loading) as model:
        adapter = models.catalogue.adapter_named(name)
        yield model if adapter is None else dataclasses.replace(model, adapter=adapter)


def serve_with_model(exchange: Exchange, models: ModelManager, body: dict, serve: Callable[[ServedModel], None],
                     *, notice: bytes | None = None) -> None:
    """serve(model) with the model the body names loaded and held; `notice`: a stream's load
    notice, whose head may then go out before serve runs (as it may while serve decodes a clip:
    media_wait.py); an error after such a head goes in the stream."""
    wait = LoadWait(exchange, notice)
    try:
        with use_model(models, body, wait) as model:
            serve(model)
    except ClientGone:
        raise
    except Exception as exc:
        if not exchange.opened_early or exchange.writer.finished:
            raise           # the router answers, or cuts short a response that ended or was not ours
        if isinstance(exc, ApiError):
            error = exc
        else:
            log.exception("handler failed for %s %s", exchange.request.method, exchange.request.path)
            error = ApiError(500, "internal server error", code="server_error")
        exchange.writer.stream(exchange.errors.stream_frame(error))
        exchange.writer.end_stream()
