"""An image's or a clip's decode as a client sees it (dialects/media_wait.py), over a real socket
pair and the real response writer: the decode runs on a thread of its own; a stream's head and
`: prefill` go out only once a keepalive interval passed with a decode still running, the
interval counted across a request's decodes; a client gone stops it; its refusal comes back to
the caller's thread. The decodes here wait on events the test sets (one outlasts a few of the
socket's peeks on purpose)."""

from __future__ import annotations

import socket
import threading

import pytest

from localserve.dialects.exchange import Exchange
from localserve.dialects.loading import serve_with_model
from localserve.dialects.media_wait import MediaWait
from localserve.dialects.pump import PREFILL_COMMENT
from localserve.engine.facade import AudioUnreadable, DecodeStopped
from localserve.errors import ApiError, ClientGone
from localserve.prompt.media import current_request, decodes_run_by, request_images
from localserve.wire.routes import Router
from .test_loading import ModelThereAtOnce, _exchange, _read

KEEPALIVE = 0.05


def test_a_decode_within_the_interval_sends_nothing():
    exchange, theirs = _exchange()
    assert MediaWait(exchange, PREFILL_COMMENT, 5.0)(lambda stop: ["segments"]) == ["segments"]
    # one that outlasts a few of the socket's peeks, still within the interval
    assert MediaWait(exchange, PREFILL_COMMENT, 5.0)(lambda stop: stop.wait(0.35) or ["later"]) == ["later"]
    assert not exchange.writer.started and not exchange.opened_early


def test_a_long_decode_opens_the_stream_and_keeps_it_alive_until_it_ends():
    exchange, theirs = _exchange()
    release = threading.Event()
    result: list = []
    waiting = threading.Thread(target=lambda: result.append(
        MediaWait(exchange, PREFILL_COMMENT, KEEPALIVE)(lambda stop: release.wait(10) and ["segments"])))
    waiting.start()
    theirs.settimeout(5)
    received = b""
    while received.count(PREFILL_COMMENT) < 2:      # the head, then the notice on every interval
        received += theirs.recv(4096)
    release.set()
    waiting.join(5)
    assert result == [["segments"]]
    assert received.startswith(b"HTTP/1.1 200") and b"text/event-stream" in received
    assert exchange.stream_open and exchange.opened_early


def test_the_interval_runs_across_a_request_s_decodes():
    # a request of many images, each decoded within the interval: the head goes out once their
    # decodes together pass it (each waits past a peek: the socket is looked at in each)
    exchange, theirs = _exchange()
    wait = MediaWait(exchange, PREFILL_COMMENT, 0.3)
    for _ in range(4):
        assert wait(lambda stop: stop.wait(0.15) or ["segments"]) == ["segments"]
    assert exchange.writer.started and exchange.opened_early
    theirs.settimeout(5)
    received = theirs.recv(4096)
    assert received.startswith(b"HTTP/1.1 200") and PREFILL_COMMENT in received


def test_a_whole_answer_waits_silently():
    exchange, theirs = _exchange()
    calls = []

    def decode(stop):
        calls.append(stop)
        return ["segments"]
    assert MediaWait(exchange, None, KEEPALIVE)(decode) == ["segments"]
    assert not exchange.writer.started and len(calls) == 1


def test_a_client_gone_stops_the_decode_and_ends_the_wait(caplog):
    exchange, theirs = _exchange()
    stopped = threading.Event()

    def decode(stop):
        theirs.close()              # the client leaves while the decode runs
        assert stop.wait(5)
        stopped.set()
        raise DecodeStopped("before its log-mel")
    with caplog.at_level("INFO", logger="localserve.dialects"):
        with pytest.raises(ClientGone):
            MediaWait(exchange, PREFILL_COMMENT, KEEPALIVE)(decode)
    assert stopped.is_set()                 # it stopped before the wait ended (the model was still held)
    assert "(req_test): its client left; the decode stopped before its log-mel" in caplog.text


def test_a_refusal_comes_back_to_the_caller_and_after_the_head_goes_in_the_stream():
    exchange, theirs = _exchange()
    with pytest.raises(AudioUnreadable):
        MediaWait(exchange, PREFILL_COMMENT, 5.0)(lambda stop: (_ for _ in ()).throw(AudioUnreadable("bad")))
    assert not exchange.writer.started          # refused before the interval: the router's plain 400

    exchange, theirs = _exchange()
    release = threading.Event()

    def serve(model):
        def decode(stop):
            release.wait(10)
            raise AudioUnreadable("the clip decodes to 400.0 seconds", "audio_too_long")
        with request_images(lambda: None) as scope, decodes_run_by(MediaWait(exchange, PREFILL_COMMENT, KEEPALIVE)):
            try:
                scope.run_decode(decode)
            except AudioUnreadable as exc:
                raise ApiError(400, str(exc), code=exc.code) from None

    serving = threading.Thread(target=serve_with_model, args=(exchange, ModelThereAtOnce(), {}, serve))
    serving.start()
    theirs.settimeout(5)
    received = theirs.recv(4096)
    release.set()
    serving.join(5)
    received += _read(theirs)
    assert received.startswith(b"HTTP/1.1 200") and PREFILL_COMMENT in received
    assert b"audio_too_long" in received and received.endswith(b"0\r\n\r\n")


# ---- every route's decodes: the router's scope (a count of tokens has no job, and no stream) --

class _Gate:
    def check_access(self, exchange) -> None:
        pass


def _route(handler) -> tuple[Exchange, socket.socket, Router]:
    exchange, theirs = _exchange()
    router = Router(_Gate())
    router.add("/v1/chat/completions", "POST", handler)
    return exchange, theirs, router


def test_a_route_s_decodes_run_off_its_connection_thread():
    # /v1/messages/count_tokens and the */input_tokens routes build a prompt and make no job:
    # their images' and clips' decodes take the one path that every route's take
    ran_on = []

    def count(exchange):
        scope = current_request()
        segments = scope.decode("digest", lambda stop: ran_on.append(threading.current_thread()) or ["segments"])
        exchange.send_json({"input_tokens": len(segments)})
    exchange, theirs, router = _route(count)
    router.dispatch(exchange.request, exchange.writer, "req_test")
    assert ran_on and ran_on[0] is not threading.current_thread()
    theirs.settimeout(5)
    assert theirs.recv(4096).startswith(b"HTTP/1.1 200")


def test_a_client_gone_stops_a_route_s_decode_and_no_answer_is_written(caplog):
    stopped = threading.Event()

    def count(exchange):
        def decode(stop):
            theirs.close()              # the client leaves while the decode runs
            assert stop.wait(5)
            stopped.set()
            raise DecodeStopped("before stb's decode")
        current_request().decode("digest", decode)
        exchange.send_json({"input_tokens": 1})
    exchange, theirs, router = _route(count)
    with caplog.at_level("INFO", logger="localserve.dialects"), pytest.raises(ClientGone):
        router.dispatch(exchange.request, exchange.writer, "req_test")
    assert stopped.is_set() and not exchange.writer.started
    assert "(req_test): its client left; the decode stopped before stb's decode" in caplog.text
