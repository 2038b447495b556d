"""prompt/media.py's request scope (issue 44): a request decodes each distinct image once however
often its prompt shows it or is built, asks after its client before each decode, and is held to
MAX_REQUEST_PIXELS before the first. The engine here is a stand-in that counts decodes: the
scope's bookkeeping is what is tested (the real decode is tests/e2e/test_image_bombs.py's)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import imagefiles  # tests/support/
from tinyaudio import wav_bytes
from localserve import audio
from localserve.conversation import Image
from localserve.engine.facade import ImageUnreadable
from localserve.errors import ClientGone
from localserve.generation import MEDIA_MARKER, PromptRefused
from localserve.images import from_bytes
from localserve.prompt import media
from localserve.prompt.media import decodes_run_by, request_images, tokenize_with_images


@dataclass
class Chunk:
    n_tokens: int = 2


class CountingEngine:
    """Tokenizes a character a token, decodes an image or a clip into one token and a chunk of
    two; `stops`: the stop each decode was handed."""
    n_ctx = 4096

    def __init__(self):
        self.decoded: list[bytes] = []
        self.stops: list = []

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool, limit: int | None = None) -> list[int]:
        return [ord(c) for c in text]

    def image_segments(self, data: bytes, stop=None) -> list:
        self.decoded.append(data)
        self.stops.append(stop)
        return [[7], Chunk()]

    audio_segments = image_segments


def image(seed: int, where: str) -> Image:
    return from_bytes(imagefiles.png(8, 8, seed=seed), "image/png", where)


def prompt(n: int) -> str:
    return "a" + "".join(f"{MEDIA_MARKER}b" for _ in range(n))


def test_a_repeated_image_is_decoded_once_per_request_however_often_the_prompt_is_built():
    engine = CountingEngine()
    one, two = image(1, "messages[0].content[0]"), image(2, "messages[1].content[0]")
    again = image(1, "messages[2].content[0]")
    with request_images(lambda: None):
        tokens, chunks = tokenize_with_images(engine, prompt(3), [one, two, again])
        tokenize_with_images(engine, prompt(3), [one, two, again])      # a truncation's second attempt
    assert engine.decoded == [one.data, two.data]
    assert [chunk.digest for chunk in chunks] == [one.digest, two.digest, one.digest]
    assert len(tokens) == 1 + 3 * (1 + 2 + 1)
    tokenize_with_images(engine, prompt(1), [one])          # another request decodes it again
    assert engine.decoded == [one.data, two.data, one.data]


def test_the_client_is_asked_after_before_each_decode():
    engine, asked = CountingEngine(), []

    def check() -> None:
        asked.append(len(engine.decoded))
        if len(asked) == 2:
            raise ClientGone()
    with request_images(check), pytest.raises(ClientGone):
        tokenize_with_images(engine, prompt(3), [image(i, f"messages[{i}].content[0]") for i in range(3)])
    assert asked == [0, 1] and len(engine.decoded) == 1


def test_the_request_pixel_budget_is_held_before_any_decode(monkeypatch):
    monkeypatch.setattr(media, "MAX_REQUEST_PIXELS", 150)          # two 8x8 images: 128 pixels
    engine = CountingEngine()
    images = [image(1, "messages[0].content[0]"), image(1, "messages[0].content[1]"),
              image(2, "messages[0].content[2]"), image(3, "messages[0].content[3]")]
    with request_images(lambda: None):
        tokenize_with_images(engine, prompt(3), images[:3])       # the same image twice counts once
        with pytest.raises(PromptRefused) as caught:
            tokenize_with_images(engine, prompt(4), images)
    assert (caught.value.code, caught.value.param) == ("image_too_large", "messages[0].content[3]")
    assert "MAX_REQUEST_PIXELS (150)" in str(caught.value) and "192 pixels" in str(caught.value)
    assert len(engine.decoded) == 2


def test_images_and_clips_take_one_path_the_runner_the_dialect_sets():
    """media_wait.py runs every decode of a request, each distinct image or clip once, each
    handed the stop its runner made; a refusal in the runner still names its part."""
    engine, ran = CountingEngine(), []

    def runner(decode):
        ran.append(decode)
        return decode(f"stop{len(ran)}")
    one, clip = image(1, "messages[0].content[0]"), audio.from_bytes(wav_bytes([0.0] * 1600), "wav", "messages[0].content[1]")
    with request_images(lambda: None), decodes_run_by(runner):
        _, chunks = tokenize_with_images(engine, prompt(3), [one, clip, image(1, "messages[0].content[2]")])
    assert len(ran) == 2 and engine.decoded == [one.data, clip.data]
    assert engine.stops == ["stop1", "stop2"]
    assert [chunk.digest for chunk in chunks] == [one.digest, clip.digest, one.digest]

    def unreadable(decode):
        raise ImageUnreadable("libmtmd could not decode the image")
    with request_images(lambda: None), decodes_run_by(unreadable), pytest.raises(PromptRefused) as caught:
        tokenize_with_images(engine, prompt(1), [image(2, "messages[3].content[1]")])
    assert (caught.value.code, caught.value.param) == ("invalid_image", "messages[3].content[1]")
