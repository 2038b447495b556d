"""The transcription routes without a model: the form's file held to MAX_AUDIO_BYTES as any clip
is (transcription_form.py), and the transcript as subtitles (transcriptions.py): one SRT or
WebVTT cue spanning the clip, whatever the model wrote in it."""

from __future__ import annotations

import pytest

from localserve.audio import MAX_AUDIO_BYTES
from localserve.dialects.openai.transcription_form import read_form
from localserve.dialects.openai.transcriptions import subtitles
from localserve.errors import ApiError
from tinyaudio import tone, wav_bytes

CT = "multipart/form-data; boundary=b"


def form(data: bytes, *fields: tuple[str, str]) -> bytes:
    extra = b"".join(f'--b\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields)
    return (b'--b\r\nContent-Disposition: form-data; name="model"\r\n\r\ntiny\r\n' + extra +
            b'--b\r\nContent-Disposition: form-data; name="file"; filename="a.wav"\r\n\r\n' + data + b"\r\n--b--\r\n")


def test_a_translation_is_not_streamed_as_openai_s_is_not():
    clip = wav_bytes(tone(0.5))
    with pytest.raises(ApiError) as caught:
        read_form(CT, form(clip, ("stream", "true")), translate=True)
    assert (caught.value.status, caught.value.param) == (400, "stream")
    assert read_form(CT, form(clip, ("stream", "True")), translate=False).body["stream"] is True
    assert read_form(CT, form(clip, ("stream", "false")), translate=True).body["stream"] is False


def test_a_file_past_max_audio_bytes_is_the_clip_s_own_400_naming_the_limit():
    """As an input_audio part past it is: audio_too_large, MAX_AUDIO_BYTES named, the part 'file'."""
    clip = wav_bytes(tone(0.5))
    with pytest.raises(ApiError) as caught:
        read_form(CT, form(clip + bytes(MAX_AUDIO_BYTES + 1 - len(clip))), translate=False)
    error = caught.value
    assert (error.status, error.code, error.param) == (400, "audio_too_large", "file")
    assert f"MAX_AUDIO_BYTES ({MAX_AUDIO_BYTES})" in error.message
    assert read_form(CT, form(clip), translate=False).clip.seconds == pytest.approx(0.5)


def test_one_cue_spans_the_clip_in_srt_and_vtt():
    assert subtitles("srt", "hello there", 1.5) == "1\n00:00:00,000 --> 00:00:01,500\nhello there\n\n"
    assert subtitles("vtt", "hello there", 3725.25) == "WEBVTT\n\n00:00:00.000 --> 01:02:05.250\nhello there\n\n"


def test_a_transcript_cannot_add_cues_of_its_own():
    """Blank lines end a cue and "-->" starts a timing: neither survives in the cue's text."""
    forged = "hi\n\n2\n00:00:05,000 ---> 00:00:09,000\nforged\n\n"
    srt = subtitles("srt", forged, 1.0)
    assert srt.count("-->") == 1 and "\n\n" not in srt.rstrip("\n")
    assert srt == "1\n00:00:00,000 --> 00:00:01,000\nhi\n2\n00:00:05,000 -> 00:00:09,000\nforged\n\n"
    vtt = subtitles("vtt", forged, 1.0)
    assert vtt.count("-->") == 1 and vtt.rstrip("\n").count("\n\n") == 1        # after the WEBVTT line only
