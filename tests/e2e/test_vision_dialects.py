"""Images through every dialect on the tiny model with the tiny vision projector (--mmproj), with
the official SDKs strict, both streaming modes: the answer is the bare engine's (bench/bare_vision.py:
libmtmd's own tokenize and eval of the prompt /apply-template shows, greedy token for token),
two images answer differently, and the next turn with the same image is served from the cache
(cached_tokens) with an identical answer and no second encode (/metrics)."""

from __future__ import annotations

import pytest

import imagefiles
from clients import anthropic_sdk, ollama_client, openai_sdk
from media_server import N, SERVER_MARKER, bare_answer, chat, metric
from rawhttp import post_json, request
from tinymodel import NO_EOG
from tinyvision import IMAGE_TOKENS

PNG = imagefiles.png(24, 16, seed=1)
OTHER = imagefiles.png(24, 16, seed=2)


def url(data: bytes) -> dict:
    return {"type": "image_url", "image_url": {"url": imagefiles.data_url(data)}}


ASK = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, url(PNG)]}]


def test_the_projector_is_said_at_start_in_the_model_list_and_in_ollama_s_capabilities(vision_server, vision_mmproj):
    assert f"vision projector {vision_mmproj}" in vision_server.log
    model = openai_sdk(vision_server, strict=False).models.retrieve("tiny")
    assert model.meta["vision"] is True and model.meta["mmproj"] == str(vision_mmproj)
    assert "vision" in ollama_client(vision_server).show("tiny").capabilities


@pytest.mark.parametrize("stream", [False, True])
def test_chat_an_image_is_answered_as_the_bare_engine_answers_it(vision_server, vision_bare, stream):
    expected = bare_answer(vision_server, vision_bare, ASK, [PNG])
    if stream:
        content, usage = chat(vision_server, ASK, stream=True)
    else:
        reply = chat(vision_server, ASK)
        content, usage = reply.choices[0].message.content, reply.usage
    assert content == expected
    assert usage.prompt_tokens > IMAGE_TOKENS       # the image's positions count


def test_two_images_answer_differently_and_the_same_image_next_turn_comes_from_the_cache(vision_server, vision_bare):
    first = chat(vision_server, [{"role": "user", "content": [{"type": "text", "text": "one"}, url(OTHER)]}])
    other = chat(vision_server, [{"role": "user", "content": [{"type": "text", "text": "one"}, url(PNG)]}])
    assert first.choices[0].message.content != other.choices[0].message.content
    encoded = metric(vision_server, "localserve_images_encoded_total")
    turn = [{"role": "user", "content": [{"type": "text", "text": "one"}, url(OTHER)]},
            {"role": "assistant", "content": first.choices[0].message.content},
            {"role": "user", "content": "and now?"}]
    second = chat(vision_server, turn)
    assert second.usage.prompt_tokens_details.cached_tokens > IMAGE_TOKENS
    assert metric(vision_server, "localserve_images_encoded_total") == encoded     # not encoded again
    assert second.choices[0].message.content == bare_answer(vision_server, vision_bare, turn, [OTHER])
    again = chat(vision_server, turn)
    assert again.choices[0].message.content == second.choices[0].message.content
    assert metric(vision_server, "localserve_image_seconds_total") > 0


def test_apply_template_shows_the_marker_where_an_image_stands_in_both_shapes(vision_server):
    chat = request(vision_server.port, post_json("/apply-template", {"messages": ASK})).json()["prompt"]
    responses = request(vision_server.port, post_json("/apply-template", {"input": [
        {"role": "user", "content": [{"type": "input_text", "text": "what is this?"},
                                     {"type": "input_image", "image_url": imagefiles.data_url(PNG)}]}]})).json()
    assert len(SERVER_MARKER.findall(chat)) == 1
    assert SERVER_MARKER.findall(responses["prompt"]) == SERVER_MARKER.findall(chat)
    assert responses["prompt_tokens"] > IMAGE_TOKENS


def anthropic_image(data: bytes) -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": imagefiles.b64(data)}}


def anthropic_text(client, stream: bool, **kwargs) -> str:
    kwargs["extra_body"] = {"temperature": 0, **kwargs.get("extra_body", {})}     # not in this SDK's signature
    kwargs = dict(model="tiny", max_tokens=N, **kwargs)
    if stream:
        with client.messages.stream(**kwargs) as events:
            return "".join(events.text_stream)
    return "".join(b.text for b in client.messages.create(**kwargs).content if b.type == "text")


@pytest.mark.parametrize("stream", [False, True])
def test_anthropic_an_image_is_answered_as_the_bare_engine_answers_it(vision_server, vision_bare, stream):
    expected = bare_answer(vision_server, vision_bare, ASK, [PNG])
    messages = [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, anthropic_image(PNG)]}]
    client = anthropic_sdk(vision_server)
    assert anthropic_text(client, stream, messages=messages, extra_body={"logit_bias": NO_EOG}) == expected
    counted = client.messages.count_tokens(model="tiny", messages=messages).input_tokens
    usage = client.messages.create(model="tiny", max_tokens=1, messages=messages).usage
    assert counted == usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
    assert counted == chat(vision_server, ASK).usage.prompt_tokens      # the same prompt, its image's positions counted


def test_anthropic_an_image_in_a_tool_result_reaches_the_model(vision_server):
    """Claude Code's Read tool on a PNG: the image comes back inside a tool_result."""
    def loop(data: bytes) -> str:
        messages = [{"role": "user", "content": "look at the screen"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read",
                                                       "input": {"file_path": "/tmp/shot.png"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                                  "content": [anthropic_image(data)]}]}]
        tools = [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}]
        return anthropic_text(anthropic_sdk(vision_server), False, messages=messages, tools=tools,
                              extra_body={"logit_bias": NO_EOG}, tool_choice={"type": "none"})
    assert loop(PNG) != loop(OTHER)


@pytest.mark.parametrize("stream", [False, True])
def test_responses_input_image_is_answered_as_the_bare_engine_answers_it(vision_server, vision_bare, stream):
    expected = bare_answer(vision_server, vision_bare, ASK, [PNG])
    client = openai_sdk(vision_server)
    item = [{"role": "user", "content": [{"type": "input_text", "text": "what is this?"},
                                         {"type": "input_image", "image_url": imagefiles.data_url(PNG)}]}]
    if stream:
        events = list(client.responses.create(model="tiny", input=item, max_output_tokens=N, temperature=0,
                                              stream=True, extra_body={"logit_bias": NO_EOG}))
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    else:
        text = client.responses.create(model="tiny", input=item, max_output_tokens=N, temperature=0,
                                       extra_body={"logit_bias": NO_EOG}).output_text
    assert text == expected


@pytest.mark.parametrize("stream", [False, True])
def test_ollama_images_are_answered_as_the_bare_engine_answers_them(vision_server, vision_bare, stream):
    # Ollama's images stand before the message's text
    messages = [{"role": "user", "content": [url(PNG), {"type": "text", "text": "hi"}]}]
    expected = bare_answer(vision_server, vision_bare, messages, [PNG])
    client = ollama_client(vision_server)
    options = {"temperature": 0, "num_predict": N}
    bias = {"logit_bias": {int(k): v for k, v in NO_EOG.items()}}
    reply = client.chat(model="tiny", stream=stream, options={**options, **bias},
                        messages=[{"role": "user", "content": "hi", "images": [imagefiles.b64(PNG)]}])
    text = "".join(part.message.content for part in reply) if stream else reply.message.content
    assert text == expected


def test_responses_an_image_in_a_function_call_output_reaches_the_model(vision_server):
    """Codex's view_image: the picture comes back as a function call's output parts."""
    def loop(data: bytes) -> str:
        items = [{"role": "user", "content": "look at the screen"},
                 {"type": "function_call", "call_id": "call_1", "name": "view_image", "arguments": "{}"},
                 {"type": "function_call_output", "call_id": "call_1", "output": [
                     {"type": "input_image", "image_url": imagefiles.data_url(data)}]}]
        return openai_sdk(vision_server).responses.create(model="tiny", input=items, max_output_tokens=N, temperature=0,
                                                   store=False, extra_body={"logit_bias": NO_EOG}).output_text
    assert loop(PNG) != loop(OTHER)


def test_chat_an_image_in_a_tool_message_reaches_the_model(vision_server, vision_bare):
    """A screenshot tool's result in a Chat Completions tool message: OpenAI's are text only,
    llama-server takes media in any message, and so does this server."""
    messages = [{"role": "user", "content": "look at the screen"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "shot.png"}, url(PNG)]}]
    reply = chat(vision_server, messages)
    assert reply.choices[0].message.content == bare_answer(vision_server, vision_bare, messages, [PNG])


@pytest.mark.parametrize("stream", [False, True])
def test_an_image_libmtmd_cannot_decode_is_a_400_naming_its_part_and_the_server_goes_on(vision_server, stream):
    broken = PNG[:60] + bytes(len(PNG) - 60)         # a sound header, its pixel data zeroed
    resp = request(vision_server.port, post_json("/v1/chat/completions", {
        "stream": stream, "max_tokens": 2, "messages": [
            {"role": "user", "content": [{"type": "text", "text": "look"}, url(broken)]}]}))
    assert resp.status == 400, resp.body
    error = resp.json()["error"]
    assert error["param"] == "messages[0].content[1]" and error["code"] == "invalid_image"
    assert chat(vision_server, ASK).choices[0].finish_reason == "length"
