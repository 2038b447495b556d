"""MAX_IMAGES_PER_REQUEST is held before any image is read (dialects/image_parts.py): each dialect
counts its body's image parts by their type and refuses one too many, naming the first beyond the
limit, before a single one is base64-decoded. The images here are undecodable on purpose: read
first, the first of them would be the 400 (invalid_image) instead."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from localserve.dialects.anthropic.input import read_messages as read_anthropic
from localserve.dialects.ollama.messages import read_images as read_ollama_images
from localserve.dialects.ollama.messages import read_messages as read_ollama
from localserve.dialects.openai.chat_input import read_messages as read_chat
from localserve.dialects.responses.items import read_input as read_responses
from localserve.dialects.responses.items import read_items as read_conversation_items
from localserve.errors import ApiError
from localserve.audio import MAX_AUDIO_PER_REQUEST as MAX_CLIPS
from localserve.images import MAX_IMAGES_PER_REQUEST as MAX
from localserve.media_checks import AUDIO, IMAGE

BAD = "not base64!"          # decoding it is a 400 of its own
URL = f"data:image/png;base64,{BAD}"


def chat(n: int) -> Callable[[], object]:
    parts = [{"type": "image_url", "image_url": {"url": URL}} for _ in range(n)]
    return lambda: read_chat({"messages": [{"role": "user", "content": "look"},
                                           {"role": "user", "content": parts}]})


def anthropic_image() -> dict:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": BAD}}


def anthropic(n: int) -> Callable[[], object]:
    """Half the images in a tool result, the rest beside it."""
    inside = n // 2
    blocks = [{"type": "tool_result", "tool_use_id": "t", "content": [anthropic_image() for _ in range(inside)]},
              *(anthropic_image() for _ in range(n - inside))]
    return lambda: read_anthropic([{"role": "user", "content": blocks}], b"k" * 32)


def responses(n: int) -> Callable[[], object]:
    inside = n // 2
    items = [{"type": "function_call_output", "call_id": "c", "output": [
                 {"type": "input_image", "image_url": URL} for _ in range(inside)]},
             {"role": "user", "content": [{"type": "input_image", "image_url": URL} for _ in range(n - inside)]}]
    return lambda: read_responses(items)


def conversation_items(n: int) -> Callable[[], object]:
    items = [{"role": "user", "content": [{"type": "input_image", "image_url": URL} for _ in range(n)]}]
    return lambda: read_conversation_items(items)


def ollama(n: int) -> Callable[[], object]:
    return lambda: read_ollama([{"role": "user", "content": "a", "images": [BAD] * (n - 1)},
                                {"role": "user", "content": "b", "images": [BAD]}])


def ollama_generate(n: int) -> Callable[[], object]:
    return lambda: read_ollama_images([BAD] * n, "images")


BEYOND = {  # the place of the first image past the limit, for MAX + 1 images
    chat: "messages[1].content[100]",
    anthropic: "messages[0].content[51]",
    responses: "input[1].content[50]",
    conversation_items: "items[0].content[100]",
    ollama: "messages[1].images[0]",
    ollama_generate: "images[100]",
}


# ---- clips: MAX_AUDIO_PER_REQUEST, wherever a dialect carries one (a tool's result included) ----

CLIP = {"type": "input_audio", "input_audio": {"data": BAD, "format": "wav"}}


def chat_clips(n: int) -> Callable[[], object]:
    """Half the clips in a tool message (what a tool heard), the rest in a user turn."""
    inside = n // 2
    return lambda: read_chat({"messages": [
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]},
        {"role": "tool", "tool_call_id": "c", "content": [CLIP] * inside},
        {"role": "user", "content": [CLIP] * (n - inside)}]})


def responses_clips(n: int) -> Callable[[], object]:
    inside = n // 2
    return lambda: read_responses([{"type": "function_call_output", "call_id": "c", "output": [CLIP] * inside},
                                   {"role": "user", "content": [CLIP] * (n - inside)}])


def conversation_clips(n: int) -> Callable[[], object]:
    return lambda: read_conversation_items([{"role": "user", "content": [CLIP] * n}])


CLIP_BEYOND = {chat_clips: "messages[2].content[10]", responses_clips: "input[1].content[10]",
               conversation_clips: "items[0].content[20]"}


PLACES = [(IMAGE, body, place) for body, place in BEYOND.items()] + \
         [(AUDIO, body, place) for body, place in CLIP_BEYOND.items()]


@pytest.mark.parametrize("kind, body, place", PLACES, ids=lambda x: getattr(x, "noun", None) or getattr(x, "__name__", None))
def test_one_part_too_many_is_refused_before_any_is_read(kind, body, place):
    """Images and clips alike, tool results counted (Responses' outputs were not)."""
    limit = kind.max_per_request
    assert (MAX, MAX_CLIPS) == (100, 20)        # the places above count on them
    with pytest.raises(ApiError) as info:
        body(limit + 1)()
    error = info.value
    assert (error.status, error.code, error.param) == (400, kind.count_code, place)
    assert f"carries {limit + 1} {kind.plural}" in error.message
    assert f"{kind.count_setting} ({limit})" in error.message and f"'{place}'" in error.message


@pytest.mark.parametrize("kind, body, place", PLACES, ids=lambda x: getattr(x, "noun", None) or getattr(x, "__name__", None))
def test_as_many_parts_as_the_limit_are_each_read(kind, body, place):
    with pytest.raises(ApiError) as info:
        body(kind.max_per_request)()
    assert info.value.code == kind.refused.code       # the first one's own refusal: invalid_image, invalid_audio
