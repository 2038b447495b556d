"""Images in the legacy /v1/completions, as llama-server's /completion takes them: the prompt an
object {prompt_string, multimodal_data}, the text holding libmtmd's default marker <__media__>
once per image. On the tiny model with the tiny projector the answer is the bare engine's
(bench/bare_vision.py: libmtmd's own tokenize and eval of the same text and image, greedy token
for token), streaming and not; a bad image, a marker count that is not the image count, and a
model without a projector are 400s in OpenAI's error shape, and the server keeps serving."""

from __future__ import annotations

import pytest

import imagefiles
from clients import openai_sdk
from media_server import BANNED, N
from rawhttp import post_json, request
from tinymodel import NO_EOG
from tinyvision import IMAGE_TOKENS

PNG = imagefiles.png(24, 16, seed=1)
OTHER = imagefiles.png(24, 16, seed=2)
TEXT = "what is <__media__> this?"


def prompt(text: str = TEXT, *images: bytes) -> dict:
    return {"prompt_string": text, "multimodal_data": [imagefiles.b64(i) for i in images]}


def complete(server, body: dict):
    return request(server.port, post_json("/v1/completions", {"model": "tiny", "max_tokens": N, **body}))


def bare_text(vision_bare, text: str, images: list[bytes]) -> str:
    assert vision_bare.marker == b"<__media__>"       # libmtmd's default: what the client writes
    tokens = vision_bare.greedy(text, images, N, BANNED)
    return b"".join(vision_bare.piece(t) for t in tokens).decode("utf-8", "replace")


@pytest.mark.parametrize("stream", [False, True])
def test_a_completion_with_an_image_is_answered_as_the_bare_engine_answers_it(vision_server, vision_bare, stream):
    expected = bare_text(vision_bare, TEXT, [PNG])
    # streamed, not strict: the SDK's Completion type forbids the null finish_reason of every chunk but the last
    client = openai_sdk(vision_server, strict=not stream)
    if stream:
        chunks = list(client.completions.create(model="tiny", prompt=prompt(TEXT, PNG), max_tokens=N,
                                                temperature=0, logit_bias=NO_EOG, stream=True,
                                                stream_options={"include_usage": True}))
        text, usage = "".join(c.choices[0].text for c in chunks if c.choices), chunks[-1].usage
    else:
        reply = client.completions.create(model="tiny", prompt=prompt(TEXT, PNG), max_tokens=N, temperature=0,
                                          logit_bias=NO_EOG)
        text, usage = reply.choices[0].text, reply.usage
    assert text == expected
    assert usage.prompt_tokens > IMAGE_TOKENS       # the image's positions count


def test_two_images_answer_differently_and_echo_gives_the_prompt_as_written(vision_server):
    def answer(data: bytes, **extra) -> str:
        reply = complete(vision_server, {"prompt": [prompt(TEXT, data)], "temperature": 0,
                                         "logit_bias": NO_EOG, **extra})
        assert reply.status == 200, reply.body
        return reply.json()["choices"][0]["text"]
    first = answer(PNG)
    assert first != answer(OTHER)
    assert answer(PNG, echo=True) == TEXT + first


def test_a_prompt_object_without_multimodal_data_is_its_text(vision_server):
    plain = complete(vision_server, {"prompt": "hello there", "temperature": 0, "logit_bias": NO_EOG})
    shaped = complete(vision_server, {"prompt": {"prompt_string": "hello there"}, "temperature": 0,
                                      "logit_bias": NO_EOG})
    assert shaped.status == 200 and shaped.json()["choices"][0]["text"] == plain.json()["choices"][0]["text"]


def error_of(reply) -> dict:
    assert reply.status == 400, reply.body
    return reply.json()["error"]


@pytest.mark.parametrize("body, param, code", [
    (prompt(TEXT, PNG, b"not an image"), "prompt.multimodal_data[1]", "invalid_image"),
    ({"prompt_string": TEXT, "multimodal_data": ["%%%"]}, "prompt.multimodal_data[0]", "invalid_image"),
    (prompt(TEXT, PNG, PNG), "prompt.prompt_string", "invalid_value"),
    (prompt("no marker", PNG), "prompt.prompt_string", "invalid_value"),
    (prompt(TEXT), "prompt.prompt_string", "invalid_value"),
    (prompt("at the end <__media__>", PNG), "prompt.prompt_string", "invalid_value"),
    ({"multimodal_data": []}, "prompt.prompt_string", "invalid_value"),
    ({"prompt_string": TEXT, "multimodal_data": "abc"}, "prompt.multimodal_data", "invalid_value"),
])
def test_a_bad_multimodal_prompt_is_a_400_naming_its_part_and_the_server_keeps_serving(vision_server, body, param,
                                                                                       code):
    error = error_of(complete(vision_server, {"prompt": body}))
    assert (error["param"], error["code"], error["type"]) == (param, code, "invalid_request_error")
    assert param in error["message"]
    assert complete(vision_server, {"prompt": prompt(TEXT, PNG)}).status == 200


def test_a_webp_image_is_refused_by_its_format(vision_server):
    webp = b"RIFF\x1a\x00\x00\x00WEBPVP8 " + bytes(16)
    error = error_of(complete(vision_server, {"prompt": prompt(TEXT, webp)}))
    assert (error["param"], error["code"]) == ("prompt.multimodal_data[0]", "unsupported_image_format")
    assert "WebP" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_a_model_without_a_projector_refuses_images_and_keeps_serving(server, stream):
    error = error_of(complete(server, {"prompt": prompt(TEXT, PNG), "stream": stream}))
    assert (error["param"], error["code"]) == ("prompt.multimodal_data[0]", "model_has_no_vision")
    assert "model 'tiny' has no vision projector" in error["message"]
    assert complete(server, {"prompt": "hello"}).status == 200


def test_llama_servers_own_completion_reads_the_image_and_props_say_vision(vision_server, vision_bare):
    """/completion (llama-server's shape) takes the same object prompt; /props reports the
    modality and the marker a client writes."""
    props = request(vision_server.port, b"GET /props HTTP/1.1\r\nHost: localhost\r\n\r\n").json()
    assert props["modalities"]["vision"] is True and props["media_marker"] == "<__media__>"
    resp = request(vision_server.port, post_json("/completion", {"prompt": prompt(TEXT, PNG), "n_predict": N,
                                                                 "temperature": 0, "logit_bias": NO_EOG}))
    assert resp.status == 200, resp.body
    answer = resp.json()
    assert answer["content"] == bare_text(vision_bare, TEXT, [PNG]) and answer["tokens_evaluated"] > IMAGE_TOKENS
