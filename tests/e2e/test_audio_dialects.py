"""Audio through the dialects that define it, on the tiny model with the tiny audio projector
(--mmproj, tests/support/tinyaudio.py), with the official openai SDK strict: Chat Completions'
input_audio (WAV, MP3, FLAC; whole and streamed), Responses' input_audio and legacy completions'
multimodal_data answer as the bare engine does (bench/bare_vision.py: libmtmd's own decode,
tokenize and eval of the prompt /apply-template shows and the client's own bytes, greedy token
for token); a repeated clip next turn comes from the cache (/metrics); each bad clip is a 400
naming its part (hostile headers included: an MP3 Xing tag or a FLAC STREAMINFO that declares
hours, a FLAC hiding MP3 frames that dr_flac cannot open, a clip of one sample, which would end
the process inside libmtmd), in a stream too, and
the server goes on;
Anthropic's Messages API, which defines no audio, refuses an audio block by its place. On a model
without an audio encoder a clip in the turn being answered is a 400 model_has_no_audio and an
earlier one a text placeholder."""

from __future__ import annotations

import base64

import openai
import pytest

from clients import anthropic_sdk, openai_sdk
from localserve.media_checks import AUDIO_OMITTED
from media_server import N, SERVER_MARKER, BANNED, bare_answer, chat, metric
from rawhttp import post_json, request
from tinyaudio import audio_tokens, flac_bytes, flac_with_blocks, mp3_bytes, silent_mp3_frames, tone, wav_bytes, with_xing
from tinymodel import NO_EOG

CLIP = wav_bytes(tone(1.0, freq=300, glide=500))
OTHER = wav_bytes(tone(1.0, freq=900))


@pytest.fixture(scope="module")
def deaf(vision_server):
    """A model whose projector has no audio encoder."""
    return vision_server


def part(data: bytes, fmt: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def url_part(data: bytes, media_type: str, fmt: str | None = None, field: str = "data") -> dict:
    """The clip as a data: URL in `data` or `url` (llama-server takes both), `format` beside it or not."""
    value = {field: f"data:{media_type};base64,{base64.b64encode(data).decode()}"}
    return {"type": "input_audio", "input_audio": value if fmt is None else {**value, "format": fmt}}


def ask(data: bytes, fmt: str = "wav") -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, part(data, fmt)]}]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_a_clip_is_answered_as_the_bare_engine_answers_it(audio_server, audio_bare, stream):
    expected = bare_answer(audio_server, audio_bare, ask(CLIP), [CLIP])
    if stream:
        content, usage = chat(audio_server, ask(CLIP), stream=True)
    else:
        reply = chat(audio_server, ask(CLIP))
        content, usage = reply.choices[0].message.content, reply.usage
    assert content == expected
    assert usage.prompt_tokens > audio_tokens() and usage.prompt_tokens_details.audio_tokens == audio_tokens()


@pytest.mark.parametrize("fmt, field", [(None, "data"), ("wav", "data"), (None, "url")])
def test_a_clip_as_a_data_url_is_the_same_clip(audio_server, fmt, field):
    plain = chat(audio_server, ask(CLIP))
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this?"},
                                             url_part(CLIP, "audio/wav", fmt, field)]}]
    reply = chat(audio_server, messages)
    assert reply.choices[0].message.content == plain.choices[0].message.content
    assert reply.usage.prompt_tokens_details.audio_tokens == plain.usage.prompt_tokens_details.audio_tokens > 0


# a FLAC with blocks after STREAMINFO (a seek table, tags, padding that hides MP3 frames)
TAGGED_FLAC = flac_with_blocks(flac_bytes(tone(1.2, freq=500)), [(3, bytes(18)), (4, bytes(8)), (1, silent_mp3_frames(5))])
# one declaring 1 s whose metadata never ends: dr_flac cannot open it and dr_mp3 decoded the
# 100 s of frames in its padding instead (a 200 of four windows; 24 MB of them were 3 GB of floats)
UNENDING_FLAC = flac_with_blocks(flac_bytes(tone(1.0)), [(1, silent_mp3_frames(100))], tail=b"\x00\x00")


@pytest.mark.parametrize("fmt, data", [("mp3", mp3_bytes(tone(1.2, freq=500))), ("flac", flac_bytes(tone(1.2, freq=500))),
                                       ("flac", TAGGED_FLAC)])
def test_mp3_and_flac_go_through_libmtmd_s_own_decoders(audio_server, audio_bare, fmt, data):
    reply = chat(audio_server, ask(data, fmt))
    assert reply.choices[0].message.content == bare_answer(audio_server, audio_bare, ask(data, fmt), [data])


def test_the_same_clip_next_turn_comes_from_the_cache(audio_server, audio_bare):
    first = chat(audio_server, ask(OTHER))
    encoded = metric(audio_server, "localserve_audio_chunks_encoded_total")
    assert encoded >= 1
    turn = [*ask(OTHER), {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "and now?"}]
    second = chat(audio_server, turn)
    assert second.usage.prompt_tokens_details.cached_tokens > audio_tokens()
    assert second.usage.prompt_tokens_details.audio_tokens == audio_tokens()       # in the prompt, cached or not
    assert metric(audio_server, "localserve_audio_chunks_encoded_total") == encoded        # not encoded again
    assert second.choices[0].message.content == bare_answer(audio_server, audio_bare, turn, [OTHER])
    assert metric(audio_server, "localserve_audio_seconds_total") > 0


def test_responses_input_audio_is_answered_as_chat_is(audio_server, audio_bare):
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "what is this?"}, part(CLIP)]}]}
    reply = openai_sdk(audio_server).responses.create(model="tiny", max_output_tokens=N, temperature=0,
                                                extra_body={"logit_bias": NO_EOG}, **body)
    assert reply.output_text == bare_answer(audio_server, audio_bare, body, [CLIP])


def test_completions_multimodal_data_takes_clips_as_llama_server_does(audio_server, audio_bare):
    prompt = "Listen: <__media__> and say"
    reply = request(audio_server.port, post_json("/v1/completions", {
        "model": "tiny", "max_tokens": N, "temperature": 0, "logit_bias": NO_EOG,
        "prompt": {"prompt_string": prompt, "multimodal_data": [base64.b64encode(CLIP).decode()]}}))
    assert reply.status == 200, reply.body
    tokens = audio_bare.greedy(prompt, [CLIP], N, BANNED)
    expected = b"".join(audio_bare.piece(t) for t in tokens).decode("utf-8", "replace")
    assert reply.json()["choices"][0]["text"] == expected


BAD = [
    ("not base64", {"type": "input_audio", "input_audio": {"data": "%%%not base64%%%", "format": "wav"}},
     "invalid_audio"),
    ("wrong format", part(CLIP, "mp3"), "audio_format_mismatch"),
    ("ogg", part(b"OggS" + bytes(60), "wav"), "unsupported_audio_format"),
    ("truncated", part(CLIP[:200]), "invalid_audio"),
    ("one sample", part(wav_bytes([0.5])), "audio_too_short"),
    ("xing says hours", part(with_xing(mp3_bytes(tone(0.5)), 2 ** 31), "mp3"), "audio_too_long"),
    ("streaminfo says hours", part(flac_bytes(tone(0.5), declared=2 ** 35), "flac"), "audio_too_long"),
    ("streaminfo says nothing", part(flac_bytes(tone(0.5), declared=0), "flac"), "invalid_audio"),
    ("flac hiding mp3", part(UNENDING_FLAC, "flac"), "invalid_audio"),
    ("no format", {"type": "input_audio", "input_audio": {"data": base64.b64encode(CLIP).decode()}}, None),
    ("data URL of an image", url_part(CLIP, "image/png"), "unsupported_audio_format"),
    ("data URL against its format", url_part(CLIP, "audio/wav", "mp3"), "audio_format_mismatch"),
    ("a URL to fetch", {"type": "input_audio", "input_audio": {"url": "http://127.0.0.1:9/clip.wav"}},
     "remote_audio_url"),
]


@pytest.mark.parametrize("name, bad, code", BAD, ids=[b[0] for b in BAD])
def test_a_bad_clip_is_a_400_naming_its_part(audio_server, name, bad, code):
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, bad]}]
    with pytest.raises(openai.BadRequestError) as caught:
        chat(audio_server, messages)
    error = caught.value.body
    assert error["param"].startswith("messages[0].content[1]"), error
    if code:
        assert error["code"] == code, error
    assert chat(audio_server, ask(CLIP)).choices[0].message.content          # the server goes on


def test_a_bad_clip_in_a_stream_is_still_a_400_before_any_head(audio_server):
    # the decode runs beside the connection (dialects/media_wait.py); a short clip's refusal,
    # found by the decode itself (one sample) or before it, still comes before the stream's head
    for name, bad, code in BAD:
        reply = request(audio_server.port, post_json("/v1/chat/completions", {
            "model": "tiny", "max_tokens": 2, "stream": True,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, bad]}]}))
        assert reply.status == 400 and reply.json()["error"]["param"].startswith("messages[0].content[1]"), name
        assert code is None or reply.json()["error"]["code"] == code, name


def test_anthropic_defines_no_audio_and_refuses_the_block_by_its_place(audio_server):
    with pytest.raises(Exception) as caught:
        anthropic_sdk(audio_server).messages.create(model="tiny", max_tokens=4, messages=[
            {"role": "user", "content": [{"type": "text", "text": "hi"}, part(CLIP)]}])
    assert caught.value.status_code == 400
    assert "messages[0].content[1]" in str(caught.value) and "defines no audio" in str(caught.value)


def test_a_model_without_audio_refuses_the_newest_clip_and_shows_an_older_one_as_text(deaf):
    with pytest.raises(openai.BadRequestError) as caught:
        chat(deaf, ask(CLIP))
    assert caught.value.body["code"] == "model_has_no_audio"
    assert caught.value.body["param"] == "messages[0].content[1]"
    turn = [*ask(CLIP), {"role": "assistant", "content": "a tone"}, {"role": "user", "content": "thanks"}]
    assert chat(deaf, turn).choices[0].message.content
    shown = request(deaf.port, post_json("/apply-template", {"messages": turn})).json()["prompt"]
    assert AUDIO_OMITTED in shown and not SERVER_MARKER.search(shown)
