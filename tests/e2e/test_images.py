"""Images through every dialect on a tiny model without a vision projector, with the official SDKs
strict (openai, anthropic, ollama) and raw HTTP for what they hide (headers, params).

Without a projector an image in the turn being answered is a 400 naming the model; an image in
an earlier turn or inside a tool result becomes a placeholder text, the answer goes on and
says so (x-localserve-images-omitted and a log line). Every bad image is a 400 naming its part,
and the server keeps serving. Images are written by tests/support/imagefiles.py.
"""

from __future__ import annotations

import anthropic
import ollama
import openai
import pytest

import imagefiles
from clients import anthropic_sdk, ollama_client, openai_sdk
from rawhttp import post_json, request
from tinymodel import NO_EOG

PLACEHOLDER = "[image omitted: this model has no vision]"
HEADER = "x-localserve-images-omitted"
PNG = imagefiles.png(16, 16)
JPEG = imagefiles.jpeg(16, 16)
PROGRESSIVE = imagefiles.progressive_jpeg(24, 16, ac_scans=3)     # as most phone and web JPEGs are


def image_url(data: bytes = PNG, media_type: str = "image/png") -> dict:
    return {"type": "image_url", "image_url": {"url": imagefiles.data_url(data, media_type)}}


def anthropic_image(data: bytes = PNG, media_type: str = "image/png") -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": imagefiles.b64(data)}}


def input_image(data: bytes = PNG, media_type: str = "image/png") -> dict:
    return {"type": "input_image", "image_url": imagefiles.data_url(data, media_type)}


def no_vision(message: str) -> bool:
    return "model 'tiny' has no vision projector" in message


# ---- Chat Completions --------------------------------------------------------------------

CHAT_EARLIER = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, image_url()]},
                {"role": "assistant", "content": "A picture."},
                {"role": "user", "content": "Say more."}]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_an_image_in_the_newest_turn_is_a_400_naming_the_model(server, stream):
    client = openai_sdk(server)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="tiny", max_tokens=2, stream=stream, messages=[
            {"role": "user", "content": [{"type": "text", "text": "look"}, image_url(JPEG, "image/jpeg")]}])
    error = caught.value.body
    assert caught.value.status_code == 400 and no_vision(error["message"])
    assert (error["param"], error["code"]) == ("messages[0].content[1]", "model_has_no_vision")


@pytest.mark.parametrize("stream", [False, True])
def test_chat_an_earlier_image_is_a_placeholder_and_the_answer_says_so(server, stream):
    client = openai_sdk(server)
    raw = client.chat.completions.with_raw_response.create(model="tiny", max_tokens=3, logit_bias=NO_EOG,
                                                           stream=stream, messages=CHAT_EARLIER)
    assert raw.headers[HEADER] == "1"
    reply = raw.parse()
    if stream:
        chunks = list(reply)
        assert chunks[-1].choices[0].finish_reason == "length"
    else:
        assert reply.choices[0].finish_reason == "length" and reply.usage.completion_tokens == 3
    assert server.wait_log("image(s) shown as text: the model has no vision projector")


def test_chat_an_image_two_assistant_replies_back_is_a_placeholder(server):
    """The turn being answered starts after the *last* assistant reply: an image in the user turn
    between the first and the second reply is an earlier one, shown as text (issue 46)."""
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello."},
                {"role": "user", "content": [{"type": "text", "text": "what is this?"}, image_url(PROGRESSIVE,
                                                                                           "image/jpeg")]},
                {"role": "assistant", "content": "A picture."}, {"role": "user", "content": "Say more."}]
    raw = openai_sdk(server).chat.completions.with_raw_response.create(model="tiny", max_tokens=2, messages=messages)
    assert raw.headers[HEADER] == "1"
    shown = request(server.port, post_json("/apply-template", {"model": "tiny", "messages": messages}))
    assert shown.status == 200 and PLACEHOLDER in shown.json()["prompt"]


def test_chat_an_image_sent_beside_tool_results_is_what_the_tool_saw(server):
    """Chat Completions' tool messages take no image: clients send it in a user message after them."""
    raw = openai_sdk(server).chat.completions.with_raw_response.create(model="tiny", max_tokens=1, messages=[
        {"role": "user", "content": "Take a screenshot."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "saved"},
        {"role": "user", "content": [{"type": "text", "text": "The screenshot:"}, image_url()]}])
    assert raw.headers[HEADER] == "1" and raw.parse().choices[0].finish_reason in ("length", "stop")


def test_apply_template_shows_the_placeholder_where_the_image_was(server):
    resp = request(server.port, post_json("/apply-template", {"messages": CHAT_EARLIER}))
    assert resp.status == 200 and resp.header(HEADER) == "1"
    prompt = resp.json()["prompt"]
    assert f"what is this?\n{PLACEHOLDER}" in prompt and "Say more." in prompt
    plain = request(server.port, post_json("/apply-template", {"messages": [{"role": "user", "content": "hi"}]}))
    assert plain.header(HEADER) is None


# ---- Responses --------------------------------------------------------------------------

VIEW_IMAGE = [{"role": "user", "content": "look at shot.png"},
              {"type": "function_call", "call_id": "call_1", "name": "view_image", "arguments": '{"path":"shot.png"}'},
              {"type": "function_call_output", "call_id": "call_1", "output": [input_image(JPEG, "image/jpeg")]}]


@pytest.mark.parametrize("stream", [False, True])
def test_responses_an_input_image_in_the_newest_turn_is_a_400(server, stream):
    client = openai_sdk(server)
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="tiny", max_output_tokens=16, stream=stream, input=[
            {"role": "user", "content": [{"type": "input_text", "text": "look"}, input_image()]}])
    error = caught.value.body
    assert no_vision(error["message"]) and error["param"] == "input[0].content[1]"


@pytest.mark.parametrize("stream", [False, True])
def test_responses_a_function_output_image_is_a_placeholder(server, stream):
    client = openai_sdk(server)
    raw = client.responses.with_raw_response.create(model="tiny", max_output_tokens=16, stream=stream,
                                                    input=VIEW_IMAGE, store=False, extra_body={"logit_bias": NO_EOG})
    assert raw.headers[HEADER] == "1"
    reply = raw.parse()
    final = [event.response for event in reply if event.type == "response.incomplete"][-1] if stream else reply
    assert final.status == "incomplete" and final.usage.output_tokens == 16
    shown = request(server.port, post_json("/apply-template", {"input": VIEW_IMAGE}))
    assert shown.status == 200 and PLACEHOLDER in shown.json()["prompt"] and shown.header(HEADER) == "1"


def test_responses_a_file_id_is_a_400_there_is_no_files_api(server):
    with pytest.raises(openai.BadRequestError) as caught:
        openai_sdk(server).responses.create(model="tiny", input=[
            {"role": "user", "content": [{"type": "input_image", "file_id": "file-abc123", "detail": "auto"}]}])
    error = caught.value.body
    assert error["param"] == "input[0].content[0]" and "Files API" in error["message"]


# ---- Anthropic Messages -----------------------------------------------------------------

def read_tool_turns(result_content: list) -> list[dict]:
    """Claude Code's shape: the Read tool's result carries the image."""
    return [{"role": "user", "content": "What is in shot.png?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read",
                                               "input": {"file_path": "/w/shot.png"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": result_content}]}]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_an_image_in_the_newest_user_turn_is_a_400(server, stream):
    client = anthropic_sdk(server)
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="tiny", max_tokens=4, stream=stream, messages=[
            {"role": "user", "content": [anthropic_image(), {"type": "text", "text": "what is it?"}]}])
    error = caught.value.body["error"]
    assert error["type"] == "invalid_request_error" and no_vision(error["message"])
    assert "messages[0].content[0]" in error["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_a_tool_result_image_is_a_placeholder_and_counted_as_one(server, stream):
    client = anthropic_sdk(server)
    messages = read_tool_turns([{"type": "text", "text": "shot.png"}, anthropic_image()])
    counting = client.messages.with_raw_response.count_tokens(model="tiny", messages=messages)
    assert counting.headers[HEADER] == "1"
    counted = counting.parse().input_tokens
    as_text = read_tool_turns([{"type": "text", "text": "shot.png"}, {"type": "text", "text": PLACEHOLDER}])
    assert counted == client.messages.count_tokens(model="tiny", messages=as_text).input_tokens
    raw = client.messages.with_raw_response.create(model="tiny", max_tokens=4, stream=stream, messages=messages,
                                                   extra_body={"logit_bias": NO_EOG})
    assert raw.headers[HEADER] == "1"
    reply = raw.parse()
    if stream:
        usage = [event.usage for event in reply if event.type == "message_delta"][-1]
    else:
        usage = reply.usage
        assert reply.stop_reason == "max_tokens"
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0) \
        == counted


# ---- Ollama -------------------------------------------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_ollama_images_on_the_newest_message_are_a_400(server, stream):
    client = ollama_client(server)
    for call in (lambda: client.chat(model="tiny", stream=stream, messages=[
                     {"role": "user", "content": "what is it?", "images": [PNG]}]),
                 lambda: client.generate(model="tiny", prompt="what is it?", images=[JPEG], stream=stream)):
        with pytest.raises(ollama.ResponseError) as caught:
            result = call()
            list(result) if stream else None
        assert caught.value.status_code == 400 and no_vision(caught.value.error)


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_images_on_an_earlier_message_are_a_placeholder(server, stream):
    messages = [{"role": "user", "content": "what is it?", "images": [PNG]},
                {"role": "assistant", "content": "A picture."}, {"role": "user", "content": "Say more."}]
    options = {"num_predict": 3}
    replies = ollama_client(server).chat(model="tiny", messages=messages, stream=stream, options=options)
    last = list(replies)[-1] if stream else replies
    assert last.done and last.done_reason in ("length", "stop")
    raw = request(server.port, post_json("/api/chat", {"model": "tiny", "stream": stream, "messages": [
        {**messages[0], "images": [imagefiles.b64(PNG)]}, *messages[1:]], "options": options}))
    assert raw.status == 200 and raw.header(HEADER) == "1"


def test_ollama_images_on_a_tool_message_are_what_the_tool_saw(server):
    """A screenshot in a tool result: Ollama's tool messages take images (shown as text here)."""
    messages = [{"role": "user", "content": "take a screenshot"},
                {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "screenshot",
                                                                                  "arguments": {}}}]},
                {"role": "tool", "tool_name": "screenshot", "content": "shot.png",
                 "images": [imagefiles.b64(PNG), imagefiles.b64(PROGRESSIVE)]}]
    raw = request(server.port, post_json("/api/chat", {"model": "tiny", "stream": False, "messages": messages,
                                                       "options": {"num_predict": 2}}))
    assert raw.status == 200 and raw.header(HEADER) == "2", raw.body[:300]


# ---- compaction of a conversation that read an image ----------------------------------------

def test_compacting_a_history_with_an_earlier_image_shows_it_as_text(server):
    """Codex's remote compaction of a conversation that looked at an image, on a model without
    vision: the image is the placeholder there too, as in an ordinary turn (issue 46)."""
    history = [{"role": "user", "content": [{"type": "input_text", "text": "what is this?"},
                                            input_image(PROGRESSIVE, "image/jpeg")]},
               {"role": "assistant", "content": "A picture."}, {"role": "user", "content": "Say more."}]
    turn = request(server.port, post_json("/v1/responses", {"model": "tiny", "input": history, "store": False,
                                                            "max_output_tokens": 16}), timeout=60)
    assert turn.status == 200, turn.body[:300]
    compacted = request(server.port, post_json("/v1/responses/compact", {"model": "tiny", "input": history}),
                        timeout=120)
    assert compacted.status == 200, compacted.body[:300]
    assert compacted.json()["output"][-1]["type"] == "compaction"
    newest = request(server.port, post_json("/v1/responses/compact", {"model": "tiny", "input": history[:1]}),
                     timeout=120)      # the image in the newest turn: the summary request joins it, still text
    assert newest.status == 200, newest.body[:300]


# ---- bad images: a 400 naming the part, in every dialect; the server keeps serving ---------

def huge_png() -> bytes:
    """A PNG header that says 9000×9000 pixels: refused before anything decodes it."""
    small = imagefiles.png(1, 1)
    return small[:16] + (9000).to_bytes(4, "big") * 2 + small[24:]


BAD = {   # kind: (bytes, declared media type, a word of the message)
    "not an image": (b"just some text", "image/png", "not an image"),
    "truncated": (PNG[:20], "image/png", "truncated"),
    "too many pixels": (huge_png(), "image/png", "MAX_IMAGE_PIXELS"),
    "wrong media type": (JPEG, "image/png", "the bytes are JPEG"),
    "webp": (imagefiles.WEBP, "image/webp", "WebP"),
}
REMOTE = "https://example.com/cat.png"


def chat_body(part: dict) -> dict:
    return {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"}, part]}]}


def test_bad_images_are_400s_naming_the_part_in_every_dialect(server):
    for kind, (data, media_type, word) in BAD.items():
        cases = [
            ("/v1/chat/completions", chat_body(image_url(data, media_type)), "messages[0].content[1]"),
            ("/v1/responses", {"model": "tiny", "input": [{"role": "user", "content": [
                input_image(data, media_type)]}]}, "input[0].content[0]"),
            ("/v1/messages", {"model": "tiny", "max_tokens": 1, "messages": read_tool_turns(
                [anthropic_image(data, media_type)])}, "messages[2].content[0].content[0]"),
        ]
        if kind != "wrong media type":     # Ollama's images declare none
            cases.append(("/api/chat", {"model": "tiny", "messages": [
                {"role": "user", "content": "hi", "images": [imagefiles.b64(PNG), imagefiles.b64(data)]}]},
                "messages[0].images[1]"))
        for path, body, part in cases:
            resp = request(server.port, post_json(path, body))
            assert resp.status == 400, (kind, path, resp.body[:300])
            message = error_message(resp.json())
            assert part in message and word in message, (kind, path, message)
    for path, body in (("/v1/chat/completions", chat_body({"type": "image_url", "image_url": {"url": REMOTE}})),
                       ("/v1/responses", {"model": "tiny", "input": [{"role": "user", "content": [
                           {"type": "input_image", "image_url": REMOTE}]}]}),
                       ("/v1/messages", {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": [
                           {"type": "image", "source": {"type": "url", "url": REMOTE}}]}]})):
        resp = request(server.port, post_json(path, body))
        assert resp.status == 400 and "not fetched" in error_message(resp.json()), (path, resp.body[:300])
    # still serving, images and all
    reply = openai_sdk(server).chat.completions.create(model="tiny", max_tokens=1, messages=CHAT_EARLIER)
    assert reply.choices[0].finish_reason in ("length", "stop")


def error_message(body: dict) -> str:
    error = body["error"]
    return error if isinstance(error, str) else error["message"]


def test_too_many_images_is_a_400_naming_the_limit(server):
    parts = [image_url() for _ in range(101)]
    history = [{"role": "user", "content": parts}, {"role": "assistant", "content": "ok"},
               {"role": "user", "content": "hi"}]
    resp = request(server.port, post_json("/v1/chat/completions", {"model": "tiny", "max_tokens": 1,
                                                                   "messages": history}))
    assert resp.status == 400
    error = resp.json()["error"]
    assert "MAX_IMAGES_PER_REQUEST (100)" in error["message"] and error["param"] == "messages[0].content[100]"


UNREADABLE = "not base64!"      # read, it would be a 400 of its own (invalid_image)


@pytest.mark.parametrize("path, body, where", [
    ("/v1/chat/completions", {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{UNREADABLE}"}}] * 101}]},
     "messages[0].content[100]"),
    ("/v1/messages", {"model": "tiny", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": UNREADABLE}}] * 101}]},
     "messages[0].content[100]"),
], ids=["chat", "anthropic"])
def test_one_image_too_many_is_refused_before_any_is_read(server, path, body, where):
    resp = request(server.port, post_json(path, body))
    assert resp.status == 400, resp.body
    message = error_message(resp.json())
    assert f"'{where}'" in message and "carries 101 images" in message and "MAX_IMAGES_PER_REQUEST (100)" in message
    if path == "/v1/messages":
        assert resp.json()["type"] == "error" and resp.json()["error"]["type"] == "invalid_request_error"
    else:
        assert (resp.json()["error"]["code"], resp.json()["error"]["param"]) == ("too_many_images", where)
