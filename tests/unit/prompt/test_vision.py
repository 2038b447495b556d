"""media_checks.py's fit_media, through prompt/build.py's fit_images: a model without a vision
projector refuses an image in the turn it is asked to answer, and shows every other image
(earlier turns, tool results) as a placeholder text."""

from __future__ import annotations

import pytest

import imagefiles  # tests/support/
from localserve.conversation import Audio, Image, Message, Text, ToolCall, ToolResult, text_message
from localserve.generation import PromptRefused, SamplingParams
from localserve.images import MAX_IMAGES_PER_REQUEST
from localserve.prompt.build import ChatInput, ChatModel, build_chat_request, fit_images
from localserve.media_checks import AUDIO_OMITTED, IMAGE_OMITTED

TEXT_ONLY = ChatModel(engine=None, template=None, name="tiny")     # the policy reads neither
SEEING = ChatModel(engine=None, template=None, name="seer", vision=True)


def image(where: str = "messages[0].content[0]", seed: int = 0) -> Image:
    return Image(imagefiles.png(seed=seed), "image/png", where=where)


def test_an_image_in_the_turn_being_answered_is_refused_naming_the_model_and_the_part():
    chat = ChatInput([text_message("user", "hi"), text_message("assistant", "hello"),
                      Message("user", (Text("look"), image("messages[2].content[1]")))])
    with pytest.raises(PromptRefused) as caught:
        fit_images(TEXT_ONLY, chat)
    assert (caught.value.code, caught.value.param) == ("model_has_no_vision", "messages[2].content[1]")
    assert "model 'tiny' has no vision projector" in str(caught.value)


def test_an_image_before_the_second_assistant_reply_is_an_earlier_one():
    """The turn being answered begins after the *last* assistant reply, not the first (issue 46)."""
    chat = ChatInput([text_message("user", "hi"), text_message("assistant", "hello"),
                      Message("user", (Text("look"), image("messages[2].content[1]"))),
                      text_message("assistant", "a picture"), text_message("user", "say more")])
    fit_images(TEXT_ONLY, chat)
    assert chat.messages[2] == Message("user", (Text("look"), Text(IMAGE_OMITTED)))
    assert chat.images_omitted == 1


def test_earlier_images_and_tool_results_become_the_placeholder():
    call = ToolCall("t1", "Read", {"path": "a.png"})
    chat = ChatInput([Message("user", (image(), Text("what is this?"))),
                      Message("assistant", (Text(""), call)),
                      Message("tool", (ToolResult("t1", (Text("a.png"), image(seed=1))),)),
                      text_message("user", "go on")])
    fit_images(TEXT_ONLY, chat)
    assert chat.messages == [Message("user", (Text(IMAGE_OMITTED), Text("what is this?"))),
                             Message("assistant", (Text(""), call)),
                             Message("tool", (ToolResult("t1", (Text("a.png"), Text(IMAGE_OMITTED))),)),
                             text_message("user", "go on")]
    assert chat.images_omitted == 2


@pytest.mark.parametrize("replies", [2, 3])
def test_an_image_in_an_older_turn_is_a_placeholder_however_many_replies_ago(replies):
    """The second of its kind (issue 46, item 4): the turn being answered starts after the *last*
    reply, so an image one reply or more before it is only history."""
    messages = [text_message("user", "hi"), text_message("assistant", "hello"),
                Message("user", (image("messages[2].content[0]"), Text("what is this?")))]
    for i in range(replies - 1):
        messages += [text_message("assistant", f"answer {i}"), text_message("user", f"more {i}")]
    chat = ChatInput(messages)
    fit_images(TEXT_ONLY, chat)
    assert chat.messages[2] == Message("user", (Text(IMAGE_OMITTED), Text("what is this?")))
    assert chat.images_omitted == 1
    chat = ChatInput([*messages[:-1], Message("user", (image("messages[-1].content[0]"),))])
    with pytest.raises(PromptRefused) as caught:        # the newest turn's image is still asked about
        fit_images(TEXT_ONLY, chat)
    assert caught.value.param == "messages[-1].content[0]"


def test_a_tool_result_image_in_the_turn_being_answered_is_shown_as_text_too():
    chat = ChatInput([text_message("user", "read it"),
                      Message("assistant", (Text(""), ToolCall("t1", "Read", {}))),
                      Message("tool", (ToolResult("t1", (image(),)),))])
    fit_images(TEXT_ONLY, chat)
    assert chat.messages[-1] == Message("tool", (ToolResult("t1", (Text(IMAGE_OMITTED),)),))
    assert chat.images_omitted == 1


def test_images_beside_tool_results_are_what_the_tools_saw_and_shown_as_text():
    """Chat Completions has no image in a tool message: clients send it in a user message after it."""
    chat = ChatInput([text_message("user", "take a screenshot"),
                      Message("assistant", (Text(""), ToolCall("t1", "screenshot", {}))),
                      Message("tool", (ToolResult("t1", "saved"),)),
                      Message("user", (Text("the screenshot:"), image("messages[3].content[1]")))])
    fit_images(TEXT_ONLY, chat)
    assert chat.messages[-1] == Message("user", (Text("the screenshot:"), Text(IMAGE_OMITTED)))
    assert chat.images_omitted == 1


def test_only_images_count_as_images_omitted_and_a_clip_is_fitted_in_the_same_call():
    """The header says how many images became text; a clip on a model without audio becomes its
    own placeholder in the same fitting, counted apart (x-localserve-audio-omitted)."""
    clip = Audio(b"RIFF", "wav", where="messages[0].content[2]", seconds=1.0)
    chat = ChatInput([Message("user", (Text("look, listen"), image("messages[0].content[1]"), clip)),
                      text_message("assistant", "ok"), text_message("user", "and?")])
    assert fit_images(TEXT_ONLY, chat)
    assert chat.messages[0] == Message("user", (Text("look, listen"), Text(IMAGE_OMITTED), Text(AUDIO_OMITTED)))
    assert (chat.images_omitted, chat.audio_omitted) == (1, 1)
    assert not fit_images(TEXT_ONLY, chat)          # again: a no-op


def test_a_model_with_vision_keeps_its_images_and_text_only_chats_are_untouched():
    messages = [Message("user", (image(), Text("look")))]
    chat = ChatInput(list(messages))
    fit_images(SEEING, chat)
    assert chat.messages == messages and chat.images_omitted == 0
    plain = ChatInput([text_message("user", "hi")])
    fit_images(TEXT_ONLY, plain)
    assert plain.messages == [text_message("user", "hi")] and plain.images_omitted == 0


@pytest.mark.parametrize("model", [TEXT_ONLY, SEEING])
def test_images_past_the_request_limit_are_refused_naming_the_first_one_over(model):
    over = MAX_IMAGES_PER_REQUEST + 1
    images = tuple(image(f"messages[0].content[{k}]") for k in range(over))
    chat = ChatInput([Message("user", images), text_message("assistant", "ok"), text_message("user", "hi")])
    with pytest.raises(PromptRefused) as caught:
        fit_images(model, chat)
    assert (caught.value.code, caught.value.param) == ("too_many_images", f"messages[0].content[{over - 1}]")
    assert f"MAX_IMAGES_PER_REQUEST ({MAX_IMAGES_PER_REQUEST})" in str(caught.value)
    chat.messages[0] = Message("user", images[:-1])
    fit_images(model, chat)          # at the limit: taken


def test_building_the_request_fits_the_images_itself():
    """No dialect calls fit_images before build_chat_request: the refusal comes from building
    (before any render or token: this model has neither)."""
    chat = ChatInput([Message("user", (Text("what is this?"), image()))])
    with pytest.raises(PromptRefused) as refused:
        build_chat_request(TEXT_ONLY, chat, SamplingParams(), max_tokens=None, stop=[])
    assert refused.value.code == "model_has_no_vision"
    many = ChatInput([Message("user", tuple(image(f"messages[0].content[{i}]") for i in range(MAX_IMAGES_PER_REQUEST + 1)))])
    with pytest.raises(PromptRefused) as refused:
        build_chat_request(SEEING, many, SamplingParams(), max_tokens=None, stop=[])
    assert refused.value.code == "too_many_images"
