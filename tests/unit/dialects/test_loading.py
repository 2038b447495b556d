"""A model load as a client sees it (dialects/loading.py), over a real socket pair and the real
response writer; and the manager's side: Loading events while a load runs, no writing."""

from __future__ import annotations

import contextlib
import socket
import threading

import pytest

from localserve.dialects.exchange import Exchange
from localserve.dialects.loading import LoadWait, serve_with_model
from localserve.dialects.pump import LOADING_COMMENT
from localserve.dialects.openai.errors import OPENAI_ERRORS
from localserve.errors import ApiError, ClientGone
from localserve.generation import Loading
from localserve.models.errors import ModelLoadFailed
from localserve.models.manager import ModelManager
from localserve.models.record import Attempt
from localserve.wire.http import Request
from localserve.wire.response_writer import ResponseWriter


class _LoadingModels:
    """A model that loads (one Loading event), then fails as a load can (500 model_load_failed)."""

    @contextlib.contextmanager
    def use(self, name, *, keep_alive, n_ctx, on_loading):
        on_loading(Loading("alpha"))
        raise ModelLoadFailed("cannot load model 'alpha'")
        yield


class ModelThereAtOnce:
    """A model there at once (loading.use_model's side of the manager)."""
    class catalogue:
        @staticmethod
        def adapter_named(name):
            return None

    def use(self, name, **_):
        return contextlib.nullcontext("model")


def _exchange() -> tuple[Exchange, socket.socket]:
    ours, theirs = socket.socketpair()
    req = Request("POST", "/v1/chat/completions", "/v1/chat/completions", {}, "HTTP/1.1", [("host", "x")], b"{}")
    return Exchange(req, ResponseWriter(ours, req), {}, OPENAI_ERRORS, "req_test"), theirs


def _read(sock: socket.socket) -> bytes:
    sock.settimeout(2)
    data = b""
    while b"0\r\n\r\n" not in data:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            break
        if not chunk:
            break
        data += chunk
    return data


def test_a_streams_notice_opens_its_head_once_and_repeats_on_its_interval():
    exchange, theirs = _exchange()
    wait = LoadWait(exchange, LOADING_COMMENT)
    wait(Loading("alpha"))
    wait(Loading("alpha"))          # within the interval: nothing more
    wait.next_notice = 0.0
    wait(Loading("alpha"))          # the interval passed
    exchange.writer.end_stream()
    data = _read(theirs)
    assert data.startswith(b"HTTP/1.1 200") and b"text/event-stream" in data
    assert data.count(b": loading") == 2 and exchange.stream_open


def test_a_whole_answer_shows_nothing_and_a_client_gone_ends_the_wait():
    exchange, theirs = _exchange()
    wait = LoadWait(exchange)
    wait(Loading("alpha"))
    assert not exchange.writer.started
    theirs.close()
    with pytest.raises(ClientGone):
        wait(Loading("alpha"))


def test_an_error_after_the_notice_goes_in_band_and_ends_the_stream():
    exchange, theirs = _exchange()
    serve_with_model(exchange, _LoadingModels(), {}, lambda model: None, notice=LOADING_COMMENT)
    data = _read(theirs)
    assert data.startswith(b"HTTP/1.1 200") and b": loading" in data
    assert b'"code":"model_load_failed"' in data and data.endswith(b"0\r\n\r\n")


def test_without_a_notice_the_error_is_the_routers_to_answer():
    exchange, _ = _exchange()
    with pytest.raises(ApiError):
        serve_with_model(exchange, _LoadingModels(), {}, lambda model: None)
    assert not exchange.writer.started


def test_the_manager_tells_its_listener_while_a_load_runs_and_not_after():
    attempt = Attempt()
    heard: list[Loading] = []
    timer = threading.Timer(0.35, attempt.done.set)
    timer.start()
    ModelManager._wait(attempt, Loading("alpha"), heard.append)
    assert len(heard) >= 2 and heard[0] == Loading("alpha")     # at once, then on each poll
    heard.clear()
    ModelManager._wait(attempt, Loading("alpha"), heard.append)
    assert heard == []


def test_every_stream_shape_is_a_stream_shape_and_says_its_load_notice():
    """A dialect's stream shape subclasses StreamShape: the pump reads its media type and the
    request cycle its load notice off it (SSE: a comment; Ollama's NDJSON: silence)."""
    import importlib
    import inspect
    import pkgutil

    import localserve.dialects
    from localserve.dialects.ollama.replies import NdjsonLines
    from localserve.dialects.pump import StreamShape

    shapes = []
    for info in pkgutil.walk_packages(localserve.dialects.__path__, "localserve.dialects."):
        for _, cls in inspect.getmembers(importlib.import_module(info.name), inspect.isclass):
            if cls.__module__ == info.name and all(hasattr(cls, m) for m in ("feed", "keepalive", "end", "fail")):
                shapes.append(cls)
    assert len(shapes) >= 8
    assert [cls.__name__ for cls in shapes if StreamShape not in cls.__mro__] == []
    ndjson = [cls for cls in shapes if cls.content_type == "application/x-ndjson"]   # Ollama's answers and pulls
    assert NdjsonLines in ndjson and {cls.loading_notice() for cls in ndjson} == {None}
    assert {cls.loading_notice() for cls in shapes if cls not in ndjson} == {LOADING_COMMENT}
