"""Audio that is not the question: a clip in an earlier turn or in a tool result, in every dialect
that carries one there (Chat Completions' tool messages take input_audio parts as llama-server's
do; Responses' function_call_output and earlier input items; Ollama's `images` on an earlier
user message or a tool message), with the official SDKs.

On the tiny model with the tiny audio projector the clip reaches the model: the answer is the
bare engine's (bench/bare_vision.py: libmtmd's own decode and eval of the prompt /apply-template
shows, greedy token for token). On a model without an audio encoder (the vision server) each clip
is the text AUDIO_OMITTED where it stood, the answer the bare engine's to that text prompt,
and x-localserve-audio-omitted says how many; so is a compaction's (Codex's remote one) of a
conversation that heard a clip, its newest turn's too, since the turn being answered is the
summary request.

And the hostile shapes of one turn: one clip many times (each place encoded, up to the count
limit exactly), a clip beside an image on a model that hears but cannot see.
"""

from __future__ import annotations

import base64

import openai
import pytest

import imagefiles
from clients import ollama_client, openai_sdk
from localserve.audio import MAX_AUDIO_PER_REQUEST
from localserve.media_checks import AUDIO_OMITTED, IMAGE_OMITTED
from media_server import N, SERVER_MARKER, bare_answer, chat, metric
from rawhttp import post_json, request
from tinyaudio import audio_tokens, mp3_bytes, tone, wav_bytes
from tinymodel import NO_EOG

CLIP = wav_bytes(tone(1.0, freq=350, glide=700))
SAID = mp3_bytes(tone(0.8, freq=600))
HEADER = "x-localserve-audio-omitted"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def part(data: bytes = CLIP, fmt: str = "wav") -> dict:
    return {"type": "input_audio", "input_audio": {"data": b64(data), "format": fmt}}


CALL = {"id": "call_1", "type": "function", "function": {"name": "record", "arguments": "{}"}}
# A clip an earlier turn sent, then a tool that recorded one: Chat Completions.
CHAT = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, part(SAID, "mp3")]},
        {"role": "assistant", "content": "a tone"},
        {"role": "user", "content": "record the room"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "room.wav"}, part()]}]
# The same in Responses' items.
RESPONSES = {"input": [
    {"role": "user", "content": [{"type": "input_text", "text": "what is this?"}, part(SAID, "mp3")]},
    {"role": "assistant", "content": "a tone"},
    {"role": "user", "content": "record the room"},
    {"type": "function_call", "call_id": "call_1", "name": "record", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "call_1",
     "output": [{"type": "input_text", "text": "room.wav"}, part()]}]}
# The same in Ollama's messages: media before the text, a tool message's images its result's.
OLLAMA = [{"role": "user", "content": "what is this?", "images": [b64(SAID)]},
          {"role": "assistant", "content": "a tone"},
          {"role": "user", "content": "record the room"},
          {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "function": {"name": "record",
                                                                                           "arguments": {}}}]},
          {"role": "tool", "tool_call_id": "call_1", "content": "room.wav", "images": [b64(CLIP)]}]
AS_CHAT = [{"role": "user", "content": [part(SAID, "mp3"), {"type": "text", "text": "what is this?"}]},
           *CHAT[1:4],
           {"role": "tool", "tool_call_id": "call_1", "content": [part(), {"type": "text", "text": "room.wav"}]}]
OPTIONS = {"num_predict": N, "temperature": 0, "logit_bias": NO_EOG}


def responses(server):
    return openai_sdk(server).responses.with_raw_response.create(
        model="tiny", max_output_tokens=N, temperature=0, store=False, extra_body={"logit_bias": NO_EOG}, **RESPONSES)


def shown(server, body: dict) -> str:
    reply = request(server.port, post_json("/apply-template", body))
    assert reply.status == 200, reply.body
    return reply.json()["prompt"]


# ---- a model with an audio encoder: the clips reach it -------------------------------------

def test_chat_a_clip_in_a_tool_message_reaches_the_model(audio_server, audio_bare):
    assert len(SERVER_MARKER.findall(shown(audio_server, {"messages": CHAT}))) == 2
    reply = chat(audio_server, CHAT)
    assert reply.choices[0].message.content == bare_answer(audio_server, audio_bare, CHAT, [SAID, CLIP])


def test_responses_a_clip_in_a_function_call_output_reaches_the_model(audio_server, audio_bare):
    reply = responses(audio_server).parse()
    assert reply.output_text == bare_answer(audio_server, audio_bare, RESPONSES, [SAID, CLIP])


def test_ollama_a_clip_on_a_tool_message_reaches_the_model(audio_server, audio_bare):
    reply = ollama_client(audio_server).chat(model="tiny", messages=OLLAMA, options=OPTIONS)
    assert reply.message.content == bare_answer(audio_server, audio_bare, AS_CHAT, [SAID, CLIP])


# ---- a model without one: each clip is the placeholder, the answer the bare engine's to it -----

def test_chat_clips_in_an_earlier_turn_and_a_tool_message_are_the_placeholder(deaf, vision_bare):
    prompt = shown(deaf, {"messages": CHAT})
    assert prompt.count(AUDIO_OMITTED) == 2 and not SERVER_MARKER.search(prompt)
    assert f"what is this?\n{AUDIO_OMITTED}" in prompt and f"room.wav\n{AUDIO_OMITTED}" in prompt
    raw = openai_sdk(deaf).chat.completions.with_raw_response.create(
        model="tiny", messages=CHAT, max_tokens=N, temperature=0, logit_bias=NO_EOG)
    assert raw.headers[HEADER] == "2"
    assert raw.parse().choices[0].message.content == bare_answer(deaf, vision_bare, CHAT, [])


def test_responses_clips_in_an_earlier_item_and_a_call_output_are_the_placeholder(deaf, vision_bare):
    prompt = shown(deaf, RESPONSES)
    assert prompt.count(AUDIO_OMITTED) == 2 and not SERVER_MARKER.search(prompt)
    raw = responses(deaf)
    assert raw.headers[HEADER] == "2"
    assert raw.parse().output_text == bare_answer(deaf, vision_bare, RESPONSES, [])


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_clips_on_an_earlier_and_a_tool_message_are_the_placeholder(deaf, vision_bare, stream):
    replies = ollama_client(deaf).chat(model="tiny", messages=OLLAMA, options=OPTIONS, stream=stream)
    text = "".join(r.message.content for r in replies) if stream else replies.message.content
    assert text == bare_answer(deaf, vision_bare, AS_CHAT, [])
    raw = request(deaf.port, post_json("/api/chat", {"model": "tiny", "stream": stream, "messages": OLLAMA,
                                                      "options": {"num_predict": 1}}))
    assert raw.status == 200 and raw.header(HEADER) == "2", raw.body[:300]


def test_compacting_a_conversation_that_heard_clips_shows_them_as_text(deaf):
    """Codex's remote compaction on a model without audio: every clip is the placeholder, the
    newest turn's too (the turn answered is the summary request), as images are."""
    for items in (RESPONSES["input"], RESPONSES["input"][:1]):
        compacted = request(deaf.port, post_json("/v1/responses/compact", {"model": "tiny", "input": items}),
                            timeout=120)
        assert compacted.status == 200, compacted.body[:300]
        assert compacted.json()["output"][-1]["type"] == "compaction"


# ---- hostile shapes: one clip many times, a clip beside an image the model cannot see ---------

def test_one_clip_many_times_each_place_its_own_chunks_up_to_the_count_limit(audio_server, audio_bare):
    """Eight times the same clip answers as the bare engine does with eight, each place encoded
    (its positions differ); MAX_AUDIO_PER_REQUEST of them are taken, one more is the 400 naming
    it, and the server goes on."""
    def times(n: int) -> list[dict]:
        return [{"role": "user", "content": [{"type": "text", "text": "how many?"}, *[part()] * n]}]
    encoded = metric(audio_server, "localserve_audio_chunks_encoded_total")
    reply = chat(audio_server, times(8))
    assert reply.choices[0].message.content == bare_answer(audio_server, audio_bare, times(8), [CLIP] * 8)
    assert metric(audio_server, "localserve_audio_chunks_encoded_total") == encoded + 8
    assert chat(audio_server, times(MAX_AUDIO_PER_REQUEST)).usage.prompt_tokens > MAX_AUDIO_PER_REQUEST * audio_tokens()
    with pytest.raises(openai.BadRequestError) as caught:
        chat(audio_server, times(MAX_AUDIO_PER_REQUEST + 1))
    assert (caught.value.body["code"], caught.value.body["param"]) == (
        "too_many_audio_clips", f"messages[0].content[{MAX_AUDIO_PER_REQUEST + 1}]")
    assert chat(audio_server, ask_once()).choices[0].message.content


def test_a_clip_beside_an_image_on_a_model_that_hears_but_cannot_see(audio_server, audio_bare):
    """The image of the turn answered is the 400 naming it, not the clip; an earlier one is the
    image placeholder while the clip of the turn answered reaches the model."""
    png = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(imagefiles.png(16, 16))}}
    with pytest.raises(openai.BadRequestError) as caught:
        chat(audio_server, [{"role": "user", "content": [part(), png]}])
    assert (caught.value.body["code"], caught.value.body["param"]) == ("model_has_no_vision", "messages[0].content[1]")
    turn = [{"role": "user", "content": [{"type": "text", "text": "see"}, png]}, {"role": "assistant", "content": "ok"},
            *ask_once()]
    assert IMAGE_OMITTED in shown(audio_server, {"messages": turn})
    reply = chat(audio_server, turn)
    assert reply.choices[0].message.content == bare_answer(audio_server, audio_bare, turn, [CLIP])


def ask_once() -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "and this?"}, part()]}]


@pytest.fixture(scope="module")
def deaf(vision_server):
    """A model whose projector has no audio encoder."""
    return vision_server
