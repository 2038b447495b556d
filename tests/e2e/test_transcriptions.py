"""POST /v1/audio/transcriptions and /v1/audio/translations with the official openai SDK strict
(``client.audio.transcriptions.create``), on the tiny model with the tiny audio projector: the
transcript is what the bare engine answers to the model's own transcription prompt (the chat
template's user turn with the instruction and the clip: bench/bare_vision.py, greedy token for
token) in json, text, verbose_json, srt, vtt and streamed (transcript.text.delta events, then
transcript.text.done with the usage); translations likewise; multipart edge cases (no file,
two files, a huge field, a file that is no audio, a truncated body, another content type) and a
model without an audio encoder are each a 400 naming the field, and the server goes on. Ollama's
audio (a clip among a message's `images`, as Ollama sends it) through the official ollama client,
against the bare engine too."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import ollama
import openai
import pytest

from clients import ollama_client, openai_sdk
from localserve.dialects.openai.transcriptions import TRANSCRIBE, TRANSLATE, subtitles
from localserve.multipart import MAX_FIELD_BYTES
from media_server import N, bare_answer, chat
from rawhttp import request
from tinyaudio import audio_tokens, mp3_bytes, tone, wav_bytes
from tinymodel import NO_EOG

CLIP = wav_bytes(tone(1.5, freq=250, glide=400))
STEER = {"max_tokens": str(N), "logit_bias": json.dumps(NO_EOG)}     # extensions: exact length, no end token


def expected(audio_server, audio_bare, instruction: str, clip: bytes = CLIP, fmt: str = "wav") -> str:
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": fmt}}
    messages = [{"role": "user", "content": [{"type": "text", "text": instruction}, part]}]
    return bare_answer(audio_server, audio_bare, messages, [clip]).strip()


def transcribe(audio_server, response_format: str = "json", **kwargs):
    return openai_sdk(audio_server).audio.transcriptions.create(model="tiny", file=("clip.wav", CLIP, "audio/wav"),
                                                          response_format=response_format, temperature=0,
                                                          extra_body=STEER, **kwargs)


def test_json_is_the_bare_engine_s_transcript_with_usage(audio_server, audio_bare):
    result = transcribe(audio_server)
    assert result.text == expected(audio_server, audio_bare, TRANSCRIBE)
    assert result.usage.type == "tokens" and result.usage.output_tokens == N
    assert result.usage.input_token_details.audio_tokens == audio_tokens()


def test_text_verbose_json_srt_and_vtt(audio_server, audio_bare):
    text = expected(audio_server, audio_bare, TRANSCRIBE)
    assert transcribe(audio_server, "text").strip() == text
    verbose = transcribe(audio_server, "verbose_json", language="en")
    assert verbose.text == expected(audio_server, audio_bare, TRANSCRIBE + " The speech is in en.")
    assert verbose.duration == pytest.approx(1.5) and verbose.language == "en"
    assert verbose.segments[0].end == pytest.approx(1.5)
    srt = transcribe(audio_server, "srt")
    assert srt.startswith("1\n00:00:00,000 --> 00:00:01,500\n") and srt == subtitles("srt", text, 1.5)
    vtt = transcribe(audio_server, "vtt")
    assert vtt.startswith("WEBVTT\n\n00:00:00.000 --> 00:00:01.500\n") and vtt == subtitles("vtt", text, 1.5)


def test_streamed_as_transcript_text_events(audio_server, audio_bare):
    events = list(transcribe(audio_server, stream=True))
    deltas = [e for e in events if e.type == "transcript.text.delta"]
    [done] = [e for e in events if e.type == "transcript.text.done"]
    assert events[-1] is done and deltas
    assert done.text == "".join(d.delta for d in deltas).strip() == expected(audio_server, audio_bare, TRANSCRIBE)
    assert done.usage.output_tokens == N


@pytest.mark.filterwarnings("ignore::DeprecationWarning")      # the SDK marks translations deprecated
def test_translations_and_an_mp3_file(audio_server, audio_bare):
    result = openai_sdk(audio_server).audio.translations.create(model="tiny", file=("clip.wav", CLIP, "audio/wav"),
                                                          temperature=0, extra_body=STEER)
    assert result.text == expected(audio_server, audio_bare, TRANSLATE)
    mp3 = mp3_bytes(tone(1.0, freq=440))
    got = openai_sdk(audio_server).audio.transcriptions.create(model="tiny", file=("clip.mp3", mp3, "audio/mpeg"),
                                                         temperature=0, extra_body=STEER)
    assert got.text == expected(audio_server, audio_bare, TRANSCRIBE, mp3, "mp3")
    verbose = openai_sdk(audio_server).audio.translations.create(model="tiny", file=("clip.wav", CLIP, "audio/wav"),
                                                                 response_format="verbose_json", extra_body=STEER)
    assert (verbose.task, verbose.language, verbose.text) == ("translate", "english", result.text)


def test_a_form_without_a_temperature_is_transcribed_at_openai_s_0(audio_server, audio_bare):
    """OpenAI's default is 0 (the docs say so too), not a chat's 0.8: LiteLLM and curl send none."""
    resp = post_form(audio_server, form(MODEL, ("file", CLIP, "a.wav"), ("response_format", b"text", None),
                                        *((k, v.encode(), None) for k, v in STEER.items())))
    assert resp.status == 200, resp.body
    assert resp.body.decode().strip() == expected(audio_server, audio_bare, TRANSCRIBE)


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_docs_curl_line_with_a_file_past_curl_s_expect_threshold(audio_server, audio_bare, tmp_path):
    """docs/audio.rst's ``curl .../v1/audio/transcriptions -F model=... -F file=@speech.wav``, with
    a file over 1 MiB, for which curl sends ``Expect: 100-continue`` and waits for the 100."""
    speech = wav_bytes(tone(35.0, freq=300, glide=500, amplitude=0.3))
    assert len(speech) > 1024 * 1024
    (tmp_path / "speech.wav").write_bytes(speech)
    steer = [arg for k, v in STEER.items() for arg in ("--form-string", f"{k}={v}")]
    done = subprocess.run(["curl", "-sSv", "--fail-with-body", f"{audio_server.base_url}/v1/audio/transcriptions",
                           "-F", "model=tiny", "-F", f"file=@{tmp_path / 'speech.wav'}", *steer],
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert b"> Expect: 100-continue" in done.stderr and b"< HTTP/1.1 100 Continue" in done.stderr
    assert json.loads(done.stdout)["text"] == expected(audio_server, audio_bare, TRANSCRIBE, speech)


def test_litellm_transcription_as_its_docs_configure_it(audio_server, audio_bare):
    """LiteLLM's ``transcription(model="openai/<name>", api_base=...)``, as its OpenAI-compatible
    docs configure it: its Whisper config asks for verbose_json (it reads the duration) and sends
    no temperature; the extensions go through as extra_body."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")     # LiteLLM fetches a price list at import
    import litellm
    result = litellm.transcription(model="openai/tiny", file=("clip.wav", CLIP, "audio/wav"),
                                   api_base=audio_server.base_url + "/v1", api_key="test", max_retries=0,
                                   extra_body=STEER)
    assert result.text == expected(audio_server, audio_bare, TRANSCRIBE)
    assert result["duration"] == pytest.approx(1.5)


def test_transcriptions_beside_audio_chats_at_once_each_answer_as_alone(audio_server, audio_bare):
    """Three transcriptions of different clips and two chats hearing them, all at once on two
    slots (clips decoded two at a time, MAX_CONCURRENT_AUDIO_DECODES): each is the bare engine's."""
    clips = [wav_bytes(tone(1.0 + i / 4, freq=200 + 150 * i)) for i in range(3)]

    def transcript(clip: bytes) -> str:
        return openai_sdk(audio_server).audio.transcriptions.create(
            model="tiny", file=("c.wav", clip, "audio/wav"), response_format="text", extra_body=STEER).strip()

    def heard(clip: bytes) -> str:
        return chat(audio_server, said(clip)).choices[0].message.content

    with ThreadPoolExecutor(5) as pool:
        texts = [pool.submit(transcript, c) for c in clips]
        chats = [pool.submit(heard, c) for c in clips[:2]]
        assert [t.result(timeout=120) for t in texts] == [expected(audio_server, audio_bare, TRANSCRIBE, c)
                                                          for c in clips]
        assert [c.result(timeout=120) for c in chats] == [bare_answer(audio_server, audio_bare, said(c), [c])
                                                          for c in clips[:2]]


def said(clip: bytes) -> list[dict]:
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": "wav"}}
    return [{"role": "user", "content": [{"type": "text", "text": "what was said?"}, part]}]


def test_ollama_chat_and_generate_take_a_clip_among_images(audio_server, audio_bare):
    """Ollama sends audio in `images` (its llm/media.go tells a WAV or MP3 by its first bytes);
    its messages put the media before the text."""
    client = ollama_client(audio_server)
    options = {"num_predict": N, "temperature": 0, "logit_bias": NO_EOG}
    part = {"type": "input_audio", "input_audio": {"data": base64.b64encode(CLIP).decode(), "format": "wav"}}
    want = bare_answer(audio_server, audio_bare, [{"role": "user", "content": [
        part, {"type": "text", "text": "What is said?"}]}], [CLIP]).strip()
    chat = client.chat(model="tiny", options=options, messages=[
        {"role": "user", "content": "What is said?", "images": [ollama.Image(value=CLIP)]}])
    assert chat.message.content.strip() == want
    generated = client.generate(model="tiny", prompt="What is said?", images=[ollama.Image(value=CLIP)],
                                options=options)
    assert generated.response.strip() == want
    assert chat.prompt_eval_count == generated.prompt_eval_count > audio_tokens()


def form(*parts: tuple[str, bytes, str | None], boundary: str = "xyz") -> bytes:
    out = b""
    for name, data, filename in parts:
        extra = f'; filename="{filename}"' if filename else ""
        out += f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"{extra}\r\n\r\n'.encode() + data + b"\r\n"
    return out + f"--{boundary}--\r\n".encode()


def post_form(audio_server, body: bytes, content_type: str = "multipart/form-data; boundary=xyz"):
    head = (f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: localhost\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    return request(audio_server.port, head + body, timeout=30)


MODEL = ("model", b"tiny", None)
EDGES = [
    ("no file", form(MODEL), "file"),
    ("two files", form(MODEL, ("file", CLIP, "a.wav"), ("file", CLIP, "b.wav")), "file"),
    ("file as a field", form(MODEL, ("file", b"RIFF", None)), "file"),
    ("huge field", form(MODEL, ("prompt", b"x" * (MAX_FIELD_BYTES + 1), None), ("file", CLIP, "a.wav")), "prompt"),
    ("no audio", form(MODEL, ("file", b"just some text, not audio", "a.wav")), "file"),
    ("truncated", form(MODEL, ("file", CLIP, "a.wav"))[:-40], "file"),
    ("no model", form(("file", CLIP, "a.wav")), "model"),
    ("bad format", form(MODEL, ("file", CLIP, "a.wav"), ("response_format", b"xml", None)), "response_format"),
    ("word timings", form(MODEL, ("file", CLIP, "a.wav"), ("timestamp_granularities[]", b"word", None)),
     "timestamp_granularities[]"),
]


@pytest.mark.parametrize("name, body, param", EDGES, ids=[e[0] for e in EDGES])
def test_multipart_edge_cases_are_a_400_naming_the_field(audio_server, name, body, param):
    resp = post_form(audio_server, body)
    assert resp.status == 400, resp.body
    assert resp.json()["error"]["param"] == param, resp.body
    assert transcribe(audio_server, "text")                     # the server goes on


def test_a_json_body_is_no_form(audio_server):
    resp = post_form(audio_server, b'{"model": "tiny"}', "application/json")
    assert resp.status == 400 and "multipart/form-data" in resp.json()["error"]["message"]


def test_a_model_without_an_audio_encoder_is_a_400(vision_server):
    with pytest.raises(openai.BadRequestError) as caught:           # its projector has no audio encoder
        transcribe(vision_server)
    assert caught.value.body["code"] == "model_has_no_audio" and caught.value.body["param"] == "file"
    with pytest.raises(ollama.ResponseError) as refused:
        ollama_client(vision_server).chat(model="tiny", messages=[{"role": "user", "content": "hi",
                                                                   "images": [ollama.Image(value=CLIP)]}])
    assert refused.value.status_code == 400 and "messages[0].images[0]" in refused.value.error
