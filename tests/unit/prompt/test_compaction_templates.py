"""Every real chat template (llama.cpp's corpus) renders what compaction gives it: the request for a
summary after a conversation that ends with the user's turn, and a conversation whose head a summary
replaced, each around the user's turns (a template that insists turns alternate refuses two user
turns in a row; compaction never makes them)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from template_corpus import corpus_names, corpus_templates  # noqa: E402

from localserve.conversation import text_message  # noqa: E402
from localserve.models.loaded import detect_chat_family  # noqa: E402
from localserve.prompt.build import ChatInput, render_chat  # noqa: E402
from localserve.prompt.compaction import (SUMMARY_REQUEST_END, join_user_turn, replace_head,  # noqa: E402
                                          summary_request_text)
from localserve.prompt.templates import ChatTemplate  # noqa: E402

CONVERSATION = [text_message("system", "Be brief."), text_message("user", "Name a tea."),
                text_message("assistant", "Sencha."), text_message("user", "And a coffee?"),
                text_message("assistant", "Mocha."), text_message("user", "Which is stronger?")]


def render(name: str, messages) -> str:
    template = ChatTemplate(f"corpus:{name}", corpus_templates()[name], "<s>", "</s>")
    template = dataclasses.replace(template, calls_family=detect_chat_family(template))
    return render_chat(template, ChatInput(messages=list(messages)))


def test_the_corpus_is_there():
    assert len(corpus_templates()) >= 60


@pytest.mark.parametrize("name", corpus_names())
def test_the_request_for_a_summary_renders(name):
    prompt = render(name, join_user_turn(CONVERSATION, text_message("user", summary_request_text())))
    assert SUMMARY_REQUEST_END in prompt and "Which is stronger?" in prompt


@pytest.mark.parametrize("name", corpus_names())
def test_a_conversation_after_its_head_was_summarised_renders(name):
    prompt = render(name, replace_head(CONVERSATION, 3, "Tea was named: Sencha."))
    assert "Tea was named: Sencha." in prompt and "And a coffee?" in prompt and "Name a tea." not in prompt
