"""An image's or a clip's decode as a client sees it: off the connection thread, which answers the client meanwhile.

libmtmd's decode of a large image (stb's inflate of a 30-megapixel PNG, then the resize and
normalising mtmd_tokenize does: half a second) or of a long clip (miniaudio's decode and
resampling, then the log-mel frames: a second or more) happens while the request is built,
before there is a job to stream, or with no job at all (a count of tokens, a template shown).
So each decode of every request (prompt/media.py's one path for both kinds:
RequestImages.decode; the router opens each request's scope with request_media) runs on a
thread of its own while the connection thread waits as it waits for a job (job_events.py): a
peek at the socket every DISCONNECT_POLL_INTERVAL; a client that left sets the decode's stop
(engine/vision.py and engine/audio.py stop before their next step) and, once the decode
stopped, the wait ends with ClientGone: no job is made, no answer written. A route that
streams (request_cycle.py) swaps in a MediaWait with its notice: the stream's head goes out
with it (the `: prefill` comment) once a keepalive interval has passed with a decode still
running, counted from the request's first decode (a request of many images, each decoded
within the interval, is no silence longer than one), and the notice again every interval
after. Decodes that end sooner, every small or refused image and every short or refused clip
among them, are answered as if they had been decoded on the connection thread, a refusal a
plain 400; what is refused after the head went out (an image stb or the projector cannot read,
a clip that decoded to more than its header said, a prompt the media made too long for the
context) is an error in the stream
(loading.serve_with_model: the head went out early, Exchange.opened_early).
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import AbstractContextManager

from ..engine.facade import DecodeStopped
from ..prompt.media import Decode, RequestImages, request_images
from ..settings import DISCONNECT_POLL_INTERVAL
from .exchange import Exchange
from .pump import open_stream_early

log = logging.getLogger("localserve.dialects")


def request_media(exchange: Exchange) -> AbstractContextManager[RequestImages]:
    """The scope of one request's images and clips (the router's, around its handler): each
    decoded once, off the connection thread, its client watched; nothing sent meanwhile."""
    return request_images(exchange.raise_if_gone, MediaWait(exchange, None, 0))


class MediaWait:
    """Runs a request's image and clip decodes (prompt/media.py's run_decode) for `exchange`;
    `notice`: a stream's keepalive before its job (None: a whole answer, or NDJSON, which has no
    comment line), sent every `keepalive` seconds (0: never) from the request's first decode."""

    def __init__(self, exchange: Exchange, notice: bytes | None, keepalive: float):
        self.exchange = exchange
        self.notice = notice if keepalive > 0 else None
        self.keepalive = keepalive
        self.next_notice: float | None = None    # set by the first decode: the interval runs across decodes

    def __call__(self, decode: Decode) -> list:
        stop = threading.Event()
        done = threading.Event()
        outcome: list = []                       # (True, segments) or (False, the exception)
        threading.Thread(target=self._run, args=(decode, stop, done, outcome), name="media-decode",
                         daemon=True).start()
        if self.next_notice is None:
            self.next_notice = time.monotonic() + self.keepalive
        try:
            while not done.wait(DISCONNECT_POLL_INTERVAL):
                self.exchange.raise_if_gone()
                if self.notice is not None and time.monotonic() >= self.next_notice:
                    self.next_notice = time.monotonic() + self.keepalive
                    self._send_notice()
        except BaseException:                    # the client left (or the write failed): stop the decode
            stop.set()
            # and wait for it to stop (at most its current step): the model stays held (use_model)
            # until then, so an unload cannot free the projector under the decode
            done.wait()
            raise
        succeeded, value = outcome[0]
        if succeeded:
            return value
        raise value

    def _send_notice(self) -> None:
        open_stream_early(self.exchange)
        self.exchange.writer.stream(self.notice)

    def _run(self, decode: Decode, stop: threading.Event, done: threading.Event, outcome: list) -> None:
        try:
            outcome.append((True, decode(stop)))
        except DecodeStopped as exc:
            log.info("%s (%s): its client left; the decode stopped %s", self.exchange.request.path,
                     self.exchange.request_id, exc)
        except BaseException as exc:             # handed to the connection thread, which raises it
            outcome.append((False, exc))
        finally:
            done.set()
