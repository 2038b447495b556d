"""Every real chat template (llama.cpp's corpus) shows an image where it stands: the media marker
once per image, in order, in a user turn and in a tool result, through the code the server
renders with (render_chat). libmtmd then puts the image at the marker (prompt/media.py); a
template that lost or repeated one would be a 400 there."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from template_corpus import corpus_names, corpus_templates  # noqa: E402

from localserve.conversation import Image, Message, Text, ToolCall, ToolResult  # noqa: E402
from localserve.generation import MEDIA_MARKER  # noqa: E402
from localserve.prompt.build import ChatInput, render_chat  # noqa: E402
from localserve.prompt.templates import ChatTemplate  # noqa: E402

FIRST = Image(data=b"first", media_type="image/png")
SECOND = Image(data=b"second", media_type="image/png")

USER_TURN = [Message("user", (Text("What is in this picture?"), FIRST))]
TOOL_RESULT = [Message("user", (Text("Take a screenshot"),)),
               Message("assistant", (ToolCall("call_1", "screenshot", {}),)),
               Message("tool", (ToolResult("call_1", (Text("the screen:"), SECOND), name="screenshot"),))]
TWO_TURNS = [Message("user", (FIRST, Text("and this one?"))),
             Message("assistant", (Text("A cat."),)),
             Message("user", (Text("now this"), SECOND))]


def rendered(name: str, messages: list[Message]) -> str:
    return render_chat(ChatTemplate(f"corpus:{name}", corpus_templates()[name], "<s>", "</s>"), ChatInput(messages))


def test_the_corpus_is_there():
    assert len(corpus_templates()) >= 60


@pytest.mark.parametrize("name", corpus_names())
def test_an_image_in_a_user_turn_is_one_marker_beside_its_text(name):
    text = rendered(name, USER_TURN)
    assert text.count(MEDIA_MARKER) == 1
    assert "What is in this picture?" + MEDIA_MARKER in text


@pytest.mark.parametrize("name", corpus_names())
def test_images_in_two_user_turns_are_two_markers_in_order(name):
    text = rendered(name, TWO_TURNS)
    assert text.count(MEDIA_MARKER) == 2
    assert text.index("and this one?") < text.index("now this") < text.rindex(MEDIA_MARKER)


@pytest.mark.parametrize("name", corpus_names())
def test_an_image_in_a_tool_result_is_one_marker(name):
    assert rendered(name, TOOL_RESULT).count(MEDIA_MARKER) == 1
