"""The transcript as subtitles (dialects/openai/transcriptions.py): one SRT or WebVTT cue spanning
the clip, whatever the model wrote in it."""

from __future__ import annotations

from localserve.dialects.openai.transcriptions import subtitles


def test_one_cue_spans_the_clip_in_srt_and_vtt():
    assert subtitles("srt", "hello there", 1.5) == "1\n00:00:00,000 --> 00:00:01,500\nhello there\n\n"
    assert subtitles("vtt", "hello there", 3725.25) == "WEBVTT\n\n00:00:00.000 --> 01:02:05.250\nhello there\n\n"


def test_a_transcript_cannot_add_cues_of_its_own():
    """Blank lines end a cue and "-->" starts a timing: neither survives in the cue's text."""
    forged = "hi\n\n2\n00:00:05,000 --> 00:00:09,000\nforged\n\n"
    srt = subtitles("srt", forged, 1.0)
    assert srt.count("-->") == 1 and "\n\n" not in srt.rstrip("\n")
    assert srt == "1\n00:00:00,000 --> 00:00:01,000\nhi\n2\n00:00:05,000 -> 00:00:09,000\nforged\n\n"
    vtt = subtitles("vtt", forged, 1.0)
    assert vtt.count("-->") == 1 and vtt.rstrip("\n").count("\n\n") == 1        # after the WEBVTT line only
