"""Audio through the dialects that define it, on the tiny model with the tiny audio projector
(--mmproj, tests/support/tinyaudio.py), with the official openai SDK strict: Chat Completions'
input_audio (WAV, MP3, FLAC; whole and streamed), Responses' input_audio and legacy completions'
multimodal_data answer as the bare engine does (bench/bare_vision.py: libmtmd's own decode,
tokenize and eval of the prompt /apply-template shows and the client's own bytes, greedy token
for token); a repeated clip next turn comes from the cache (/metrics); each bad clip is a 400
naming its part (hostile headers included: an MP3 Xing tag or a FLAC STREAMINFO that declares
hours, a clip of one sample, which would end the process inside libmtmd) and the server goes on;
Anthropic's Messages API, which defines no audio, refuses an audio block by its place. On a model
without an audio encoder a clip in the turn being answered is a 400 model_has_no_audio and an
earlier one a text placeholder."""

from __future__ import annotations

import base64
import re

import openai
import pytest

from bench.bare_vision import BareVision
from clients import anthropic_sdk, openai_sdk
from conftest import ServerProcess
from localserve.media_checks import AUDIO_OMITTED
from rawhttp import post_json, request
from tinyaudio import audio_tokens, flac_bytes, mp3_bytes, tone, wav_bytes, with_xing, write_tiny_audio_mmproj
from tinymodel import EOG_TEXTS, NO_EOG, token_ids

N = 8
CLIP = wav_bytes(tone(1.0, freq=300, glide=500))
OTHER = wav_bytes(tone(1.0, freq=900))
SERVER_MARKER = re.compile(r"<__media_[0-9a-f]+__>")
BANNED = {token_ids()[t] for t in EOG_TEXTS}


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory):
    return write_tiny_audio_mmproj(tmp_path_factory.mktemp("mmproj") / "mmproj-audio.gguf")


@pytest.fixture(scope="module")
def server(tiny_model, mmproj, tmp_path_factory):
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--slots", "2", "--mmproj", str(mmproj),
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def deaf(tiny_model, tmp_path_factory):
    srv = ServerProcess(tiny_model, "--model-id", "tiny", env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("d2"))})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def bare(tiny_model, mmproj):
    b = BareVision(str(tiny_model), str(mmproj), n_ctx=1024)
    yield b
    b.close()


def part(data: bytes, fmt: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(data).decode(), "format": fmt}}


def ask(data: bytes, fmt: str = "wav") -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, part(data, fmt)]}]


def bare_answer(server, bare, body: dict, clips: list[bytes]) -> str:
    shown = request(server.port, post_json("/apply-template", body))
    assert shown.status == 200, shown.body
    prompt, n = SERVER_MARKER.subn(bare.marker.decode(), shown.json()["prompt"])
    assert n == len(clips)
    tokens = bare.greedy(prompt, clips, N, BANNED)
    return b"".join(bare.piece(t) for t in tokens).decode("utf-8", "replace")


def metric(server, name: str) -> float:
    body = request(server.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").body
    found = re.search(rf"^{name} ([0-9.e+]+)$", body.decode(), re.M)
    return float(found.group(1)) if found else 0.0


def chat(server, messages: list[dict], stream: bool = False):
    client = openai_sdk(server)
    if not stream:
        return client.chat.completions.create(model="tiny", messages=messages, max_tokens=N, temperature=0,
                                              logit_bias=NO_EOG)
    chunks = list(client.chat.completions.create(model="tiny", messages=messages, max_tokens=N, temperature=0,
                                                 logit_bias=NO_EOG, stream=True,
                                                 stream_options={"include_usage": True}))
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices), chunks[-1].usage


@pytest.mark.parametrize("stream", [False, True])
def test_chat_a_clip_is_answered_as_the_bare_engine_answers_it(server, bare, stream):
    expected = bare_answer(server, bare, {"messages": ask(CLIP)}, [CLIP])
    if stream:
        content, usage = chat(server, ask(CLIP), stream=True)
    else:
        reply = chat(server, ask(CLIP))
        content, usage = reply.choices[0].message.content, reply.usage
    assert content == expected
    assert usage.prompt_tokens > audio_tokens()


@pytest.mark.parametrize("fmt, data", [("mp3", mp3_bytes(tone(1.2, freq=500))), ("flac", flac_bytes(tone(1.2, freq=500)))])
def test_mp3_and_flac_go_through_libmtmd_s_own_decoders(server, bare, fmt, data):
    reply = chat(server, ask(data, fmt))
    assert reply.choices[0].message.content == bare_answer(server, bare, {"messages": ask(data, fmt)}, [data])


def test_the_same_clip_next_turn_comes_from_the_cache(server, bare):
    first = chat(server, ask(OTHER))
    encoded = metric(server, "localserve_audio_chunks_encoded_total")
    assert encoded >= 1
    turn = [*ask(OTHER), {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "and now?"}]
    second = chat(server, turn)
    assert second.usage.prompt_tokens_details.cached_tokens > audio_tokens()
    assert metric(server, "localserve_audio_chunks_encoded_total") == encoded        # not encoded again
    assert second.choices[0].message.content == bare_answer(server, bare, {"messages": turn}, [OTHER])
    assert metric(server, "localserve_audio_seconds_total") > 0


def test_responses_input_audio_is_answered_as_chat_is(server, bare):
    body = {"input": [{"role": "user", "content": [{"type": "input_text", "text": "what is this?"}, part(CLIP)]}]}
    reply = openai_sdk(server).responses.create(model="tiny", max_output_tokens=N, temperature=0,
                                                extra_body={"logit_bias": NO_EOG}, **body)
    assert reply.output_text == bare_answer(server, bare, body, [CLIP])


def test_completions_multimodal_data_takes_clips_as_llama_server_does(server, bare):
    prompt = "Listen: <__media__> and say"
    reply = request(server.port, post_json("/v1/completions", {
        "model": "tiny", "max_tokens": N, "temperature": 0, "logit_bias": NO_EOG,
        "prompt": {"prompt_string": prompt, "multimodal_data": [base64.b64encode(CLIP).decode()]}}))
    assert reply.status == 200, reply.body
    tokens = bare.greedy(prompt, [CLIP], N, BANNED)
    assert reply.json()["choices"][0]["text"] == b"".join(bare.piece(t) for t in tokens).decode("utf-8", "replace")


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
    ("no format", {"type": "input_audio", "input_audio": {"data": base64.b64encode(CLIP).decode()}}, None),
]


@pytest.mark.parametrize("name, bad, code", BAD, ids=[b[0] for b in BAD])
def test_a_bad_clip_is_a_400_naming_its_part(server, name, bad, code):
    messages = [{"role": "user", "content": [{"type": "text", "text": "hi"}, bad]}]
    with pytest.raises(openai.BadRequestError) as caught:
        chat(server, messages)
    error = caught.value.body
    assert error["param"].startswith("messages[0].content[1]"), error
    if code:
        assert error["code"] == code, error
    assert chat(server, ask(CLIP)).choices[0].message.content          # the server goes on


def test_anthropic_defines_no_audio_and_refuses_the_block_by_its_place(server):
    with pytest.raises(Exception) as caught:
        anthropic_sdk(server).messages.create(model="tiny", max_tokens=4, messages=[
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
