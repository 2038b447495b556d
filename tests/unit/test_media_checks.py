"""localserve/media_checks.py: the checks an image and a clip pass, one piece for both kinds. Each
kind's count is held at its own limit, before decoding (hold_count) and on the whole conversation
(fit_media), naming the first part past it; base64 is held to the kind's byte limit before it is
decoded; a clip's length adds up once per distinct clip; and a model that takes one kind and not
the other refuses (or shows as text) only the kind it lacks."""

from __future__ import annotations

import base64

import pytest

import imagefiles  # tests/support/
from localserve import audio, images
from localserve.audio_headers import AudioRefused
from localserve.dialects.audio_parts import input_audio
from localserve.conversation import Audio, Image, Message, Text, ToolResult, text_message
from localserve.errors import ApiError, InputRefused
from localserve.image_headers import ImageRefused
from localserve.media_checks import (AUDIO, AUDIO_OMITTED, IMAGE, IMAGE_OMITTED, KINDS, fit_media, hold_count,
                                     read_base64)
from tinyaudio import mp3_bytes, mp3_hiding_frames, tone, wav_bytes

PNG = imagefiles.png(8, 8)
WAV = wav_bytes(tone(0.05))


def image(where: str, seed: int = 0) -> Image:
    return images.from_bytes(imagefiles.png(8, 8, seed=seed), None, where)


def clip(where: str, seconds: float = 1.0, freq: float = 440.0) -> Audio:
    return Audio(wav_bytes(tone(0.01, freq=freq)), "wav", where=where, seconds=seconds)


def part(kind, where: str, n: int = 0):
    return image(where, seed=n) if kind is IMAGE else clip(where, 0.1, freq=200 + n)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.noun)
def test_a_body_s_parts_are_counted_at_the_kind_s_own_limit_naming_the_first_past_it(kind):
    limit = kind.max_per_request
    hold_count(kind, (f"p[{i}]" for i in range(limit)))
    with pytest.raises(kind.refused) as caught:
        hold_count(kind, (f"p[{i}]" for i in range(limit + 1)))
    assert (caught.value.code, caught.value.param) == (kind.count_code, f"p[{limit}]")
    assert f"carries {limit + 1} {kind.plural}, more than {kind.count_setting} ({limit})" in str(caught.value)


def test_the_limits_differ_by_kind():
    assert IMAGE.max_per_request == images.MAX_IMAGES_PER_REQUEST != AUDIO.max_per_request == audio.MAX_AUDIO_PER_REQUEST
    hold_count(IMAGE, (f"p[{i}]" for i in range(AUDIO.max_per_request + 1)))      # more clips than allowed: images


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.noun)
def test_the_conversation_is_counted_again_for_a_model_that_takes_the_kind_or_not(kind):
    limit = kind.max_per_request
    parts = tuple(part(kind, f"messages[0].content[{i}]", i) for i in range(limit + 1))
    for takes in ((kind,), ()):
        with pytest.raises(kind.refused) as caught:
            fit_media([Message("user", parts), text_message("assistant", "ok"), text_message("user", "hi")],
                      takes=takes, model_name="m")
        assert (caught.value.code, caught.value.param) == (kind.count_code, f"messages[0].content[{limit}]")
    fit_media([Message("user", parts[:-1])], takes=(kind,), model_name="m")       # at the limit: taken


@pytest.mark.parametrize("kind, data, declared", [(IMAGE, PNG, "image/png"), (AUDIO, WAV, "wav")],
                         ids=["image", "audio"])
def test_base64_is_read_by_the_kind_s_reader_within_its_byte_limit(monkeypatch, kind, data, declared):
    read = read_base64(kind, base64.b64encode(data).decode(), declared, "p")
    assert isinstance(read, kind.part) and read.where == "p"
    with pytest.raises(kind.refused, match="not valid base64"):
        read_base64(kind, "%%%", declared)
    with pytest.raises(kind.refused, match=f"expected base64 {kind.noun} data as a string"):
        read_base64(kind, 5)
    monkeypatch.setattr(kind.reader, kind.bytes_setting, len(data) - 1)
    with pytest.raises(kind.refused) as caught:
        read_base64(kind, "@" * (len(data) * 4 // 3 + 4))        # refused by its length, never decoded
    assert caught.value.code == f"{kind.noun}_too_large" and kind.bytes_setting in str(caught.value)


def test_a_request_s_clips_add_up_once_per_distinct_clip():
    half = audio.MAX_REQUEST_AUDIO_SECONDS / 2
    same = [clip(f"messages[0].content[{i}]", half) for i in range(3)]
    fit_media([Message("user", tuple(same))], takes=(AUDIO,), model_name="m")          # one clip, three times
    other = clip("messages[1].content[0]", half + 1, freq=900)
    with pytest.raises(AudioRefused) as caught:
        fit_media([Message("user", tuple(same)), Message("user", (other,))], takes=(AUDIO,), model_name="m")
    assert (caught.value.code, caught.value.param) == ("audio_too_long", "messages[1].content[0]")
    assert "MAX_REQUEST_AUDIO_SECONDS" in str(caught.value)


def test_a_request_s_clips_count_what_they_decode_to_not_what_they_walk_as():
    """MP3s whose frames walk as 10 s and hide frames dr_mp3 decodes to 200 s: twenty of them
    (200 s walked) were answered after 5,400 s of decoding (60 s of server CPU, 370 MB)."""
    clips = [audio.from_bytes(mp3_hiding_frames(200_000, i), "mp3", f"messages[0].content[{i}]") for i in range(3)]
    assert clips[0].seconds < 11 and clips[0].most_seconds > 190
    fit_media([Message("user", tuple(clips[:2]))], takes=(AUDIO,), model_name="m")
    with pytest.raises(AudioRefused) as caught:
        fit_media([Message("user", tuple(clips))], takes=(AUDIO,), model_name="m")
    assert (caught.value.code, caught.value.param) == ("audio_too_long", "messages[0].content[2]")
    wav = audio.from_bytes(wav_bytes(tone(0.5)))
    assert wav.most_seconds == wav.seconds == 0.5


def test_a_model_that_sees_but_cannot_hear_refuses_only_the_clip_asked_about():
    asked = [Message("user", (Text("what?"), image("messages[0].content[1]"), clip("messages[0].content[2]")))]
    with pytest.raises(AudioRefused) as caught:
        fit_media(asked, takes=(IMAGE,), model_name="seer")
    assert (caught.value.code, caught.value.param) == ("model_has_no_audio", "messages[0].content[2]")
    assert "model 'seer' has no audio encoder" in str(caught.value)
    earlier = [*asked, text_message("assistant", "a picture and a tone"), text_message("user", "thanks")]
    fitted, omitted = fit_media(earlier, takes=(IMAGE,), model_name="seer")
    assert omitted == {"audio": 1}
    assert fitted[0].parts == (Text("what?"), asked[0].parts[1], Text(AUDIO_OMITTED))


def test_a_model_that_takes_neither_shows_both_as_text_in_a_tool_loop():
    messages = [text_message("user", "look and listen"), text_message("assistant", "calling"),
                Message("tool", (ToolResult("t1", (image("messages[2].content[0]"), clip("messages[2].content[1]"))),))]
    fitted, omitted = fit_media(messages, takes=(), model_name="m")
    assert omitted == {"audio": 1, "image": 1}
    assert fitted[2].parts == (ToolResult("t1", (Text(IMAGE_OMITTED), Text(AUDIO_OMITTED))),)


def test_every_refusal_is_an_input_refused_with_its_kind():
    assert issubclass(ImageRefused, InputRefused) and issubclass(AudioRefused, InputRefused)
    assert (ImageRefused("x").code, AudioRefused("x").code, ImageRefused("x", "too_many_images").code) == \
        ("invalid_image", "invalid_audio", "too_many_images")


# ---- a clip as a data: URL in input_audio.data (llama-server takes one) -----------------------

def audio_part(data: str, fmt: str | None = None) -> dict:
    value = {"data": data} if fmt is None else {"data": data, "format": fmt}
    return {"type": "input_audio", "input_audio": value}


def wav_url(head: str = "data:audio/wav;base64,", data: bytes = WAV) -> str:
    return head + base64.b64encode(data).decode()


@pytest.mark.parametrize("head, fmt", [
    ("data:audio/wav;base64,", None), ("data:audio/wav;base64,", "wav"), ("DATA:Audio/X-WAV;BASE64,", "wave"),
    ("data:audio/wav;rate=16000;base64,", "audio/wav"), ("data: audio/wave ;base64,", None)])
def test_a_clip_s_data_url_is_read_with_the_format_its_media_type_names(head, fmt):
    clip = input_audio(audio_part(wav_url(head), fmt), "messages[0].content[1]")
    assert clip == read_base64(AUDIO, base64.b64encode(WAV).decode(), "wav", "messages[0].content[1]")
    assert (clip.format, clip.where) == ("wav", "messages[0].content[1]")


MP3 = mp3_bytes(tone(0.5))


@pytest.mark.parametrize("url, fmt, code, said", [
    (wav_url("data:image/png;base64,"), None, "unsupported_audio_format", "must name an audio media type"),
    (wav_url("data:;base64,"), "wav", "unsupported_audio_format", "must name an audio media type"),
    (wav_url("data:application/octet-stream;base64,"), "wav", "unsupported_audio_format", "audio media type"),
    (wav_url("data:audio/ogg;base64,"), None, "unsupported_audio_format", "'audio/ogg' is not read here"),
    (wav_url(), "mp3", "audio_format_mismatch", "the format says 'mp3' but the data: URL says 'audio/wav'"),
    (wav_url(), 7, "invalid_audio", "must be a string"),
    (wav_url("data:audio/wav;base64,", MP3), None, "audio_format_mismatch", "the bytes are MP3"),
    (wav_url("data:audio/wav,"), None, "invalid_audio", "must be base64"),
    ("data:audio/wav;" + "x" * 300 + ";base64," + base64.b64encode(WAV).decode(), None, "invalid_audio",
     "expected a data: URL"),
    ("data:audio/wav;base64,%%%not base64%%%", None, "invalid_audio", "not valid base64"),
    ("data:audio/wav;base64,", "wav", "audio_too_short", "the audio is empty")])
def test_a_bad_data_url_is_a_400_naming_the_part(url, fmt, code, said):
    with pytest.raises(ApiError) as caught:
        input_audio(audio_part(url, fmt), "input[0].content[2]")
    error = caught.value
    assert (error.status, error.code, error.param) == (400, code, "input[0].content[2]") and said in error.message


def test_a_data_url_past_the_byte_limit_is_refused_before_it_is_decoded(monkeypatch):
    decoded = []
    monkeypatch.setattr(audio, "MAX_AUDIO_BYTES", len(WAV) - 1)
    monkeypatch.setattr(base64, "b64decode", lambda *a, **k: decoded.append(a) or b"")
    with pytest.raises(ApiError) as caught:
        input_audio(audio_part(wav_url()), "messages[0].content[0]")
    assert caught.value.code == "audio_too_large" and decoded == []


# ---- input_audio.url, which llama-server reads where `data` is not given -------------------

def test_url_stands_for_a_data_not_given_and_is_read_the_same_way():
    where = "messages[0].content[1]"
    same = input_audio(audio_part(wav_url()), where)
    assert input_audio({"type": "input_audio", "input_audio": {"url": wav_url()}}, where) == same
    assert input_audio({"type": "input_audio", "input_audio": {"url": base64.b64encode(WAV).decode(),
                                                               "format": "wav"}}, where) == same
    # `data` first, as llama-server reads them
    assert input_audio({"type": "input_audio", "input_audio": {"data": wav_url(), "url": "https://x.test/a.wav"}},
                       where) == same
    with pytest.raises(ApiError) as caught:     # the url of a clip with no format is plain base64 too
        input_audio({"type": "input_audio", "input_audio": {"url": base64.b64encode(WAV).decode()}}, where)
    assert caught.value.param == f"{where}.input_audio.format"


@pytest.mark.parametrize("url", ["https://x.test/a.wav", "HTTP://10.0.0.1/admin", "file:///etc/passwd",
                                 "file:clip.wav"])
@pytest.mark.parametrize("field", ["url", "data"])
def test_a_clip_s_url_to_fetch_is_refused_never_fetched(url, field):
    with pytest.raises(ApiError) as caught:
        input_audio({"type": "input_audio", "input_audio": {field: url, "format": "wav"}}, "input[0].content[2]")
    error = caught.value
    assert (error.status, error.code, error.param) == (400, "remote_audio_url", "input[0].content[2]")
    assert "not fetched" in error.message and "data:audio/wav;base64," in error.message


def test_plain_base64_still_needs_its_format():
    with pytest.raises(ApiError) as caught:
        input_audio(audio_part(base64.b64encode(WAV).decode()), "messages[0].content[0]")
    assert caught.value.param == "messages[0].content[0].input_audio.format"
