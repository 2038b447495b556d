"""engine/vision.py's guard around libmtmd (issue 44): bytes of no format images.py reads never
reach libmtmd's helper (it takes RIFF/ID3/MPEG-sync/fLaC for audio and, built with video, runs
ffmpeg on what stb cannot read), at most MAX_CONCURRENT_DECODES images decode at once, and a
decode whose stop is set (its client left, dialects/media_wait.py) never starts, however long it
waited for its turn. The projector here has no native context: the decode itself is replaced,
the guard is what runs (the stop between stb's decode and the preprocessing:
tests/e2e/test_vision.py)."""

from __future__ import annotations

import threading
import time

import pytest

import imagefiles  # tests/support/
from localserve.engine import vision
from localserve.engine.facade import DecodeStopped, ImageUnreadable
from localserve.engine.vision import Projector


def projector(decode) -> Projector:
    made = Projector.__new__(Projector)
    made._decode = decode
    made.vision = True          # a projector with a vision encoder (one without refuses every image first)
    return made


@pytest.mark.parametrize("data", [imagefiles.WEBP, b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 20,
                                  b"ID3\x04\x00\x00" + b"\x00" * 20, b"\xff\xfb\x90\x00" + b"\x00" * 20,
                                  b"fLaC" + b"\x00" * 20, b"\x00\x00\x00\x20ftypmp42" + b"\x00" * 20])
def test_bytes_of_no_accepted_format_never_reach_libmtmd(data):
    def decode(*_):
        raise AssertionError("handed to libmtmd")
    with pytest.raises(ImageUnreadable, match="no PNG, JPEG, GIF or BMP"):
        projector(decode).image_segments(data)


def test_at_most_max_concurrent_decodes_run_at_once(monkeypatch):
    monkeypatch.setattr(vision, "_decoding", threading.BoundedSemaphore(2))
    running, most, lock = [0], [0], threading.Lock()

    def decode(data, stop):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1
        return []
    made = projector(decode)
    threads = [threading.Thread(target=made.image_segments, args=(imagefiles.png(seed=i),)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most[0] == 2
    assert vision.MAX_CONCURRENT_DECODES >= 1


def test_a_decode_stopped_while_it_waited_for_its_turn_never_reaches_libmtmd(monkeypatch):
    monkeypatch.setattr(vision, "_decoding", threading.BoundedSemaphore(1))
    decoded = []
    made = projector(lambda data, stop: decoded.append(data) or [])
    stop, outcome = threading.Event(), []

    def queued():
        try:
            made.image_segments(imagefiles.png(seed=1), stop)
        except DecodeStopped as exc:
            outcome.append(str(exc))
    with vision._decoding:                  # another image decodes meanwhile
        waiting = threading.Thread(target=queued)
        waiting.start()
        stop.set()                          # its client leaves
    waiting.join(5)
    assert outcome == ["before its decode"] and not decoded
    assert made.image_segments(imagefiles.png(seed=2), threading.Event()) == [] and len(decoded) == 1
