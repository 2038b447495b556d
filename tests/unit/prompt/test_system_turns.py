"""Role "system" inside messages (as Claude Code sends it), rendered by each family's template in process."""

from __future__ import annotations

import pytest

from family_templates import FAMILY_BOS_TOKEN, FAMILY_EOS_TOKEN, FAMILY_TEMPLATES

from localserve.dialects.openai.chat_input import read_messages
from localserve.prompt.build import ChatInput, render_chat
from localserve.prompt.templates import ChatTemplate


def chat_of(messages: list[dict]) -> ChatInput:
    """Chat Completions messages, read as the dialect reads them."""
    return ChatInput(messages=read_messages({"messages": messages}))


def _template(family: str) -> ChatTemplate:
    return ChatTemplate(family, FAMILY_TEMPLATES[family], FAMILY_BOS_TOKEN[family], FAMILY_EOS_TOKEN[family])


MID_SYSTEM = [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
              {"role": "assistant", "content": "Hello."}, {"role": "user", "content": "List files"},
              {"role": "system", "content": "The user is in /tmp."}]


@pytest.mark.parametrize("family", ["hermes", "qwen3", "llama3"])
def test_a_template_with_system_turns_shows_them_in_place(family):
    text = render_chat(_template(family), chat_of(MID_SYSTEM))
    assert "The user is in /tmp." in text and "<system>" not in text
    # the turns before it render as they would without it: the cached prefix stays
    before = render_chat(_template(family), chat_of(MID_SYSTEM[:4]))
    assert text.index("List files") == before.index("List files")


@pytest.mark.parametrize("family", ["mistral", "deepseek_r1"])
def test_a_template_without_them_gets_them_merged_into_the_user_turn(family):
    # Mistral raises on a later system turn; DeepSeek R1 keeps only the last system text.
    text = render_chat(_template(family), chat_of(MID_SYSTEM))
    assert "Be terse." in text and "<system>\nThe user is in /tmp.\n</system>" in text
    assert text.index("List files") < text.index("The user is in /tmp.")


# Keeps the first system message only: a later one is dropped without a word.
FIRST_SYSTEM_ONLY = ("{% for m in messages %}{% if m.role != 'system' or loop.first %}"
                     "<|{{ m.role }}|>{{ m.content }}\n{% endif %}{% endfor %}<|assistant|>")


def test_a_dropped_system_turn_whose_text_appears_elsewhere_is_still_merged():
    # "OK" is in the conversation already: the text alone cannot tell whether the template showed the turn
    messages = [{"role": "user", "content": "Answer OK"}, {"role": "assistant", "content": "OK"},
                {"role": "system", "content": "OK"}]
    text = render_chat(ChatTemplate("first-system", FIRST_SYSTEM_ONLY, "", ""), chat_of(messages))
    assert "<system>\nOK\n</system>" in text
    every_turn = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}<|assistant|>"
    shown = render_chat(ChatTemplate("every-turn", every_turn, "", ""), chat_of(messages))
    assert "<|system|>OK\n" in shown and "<system>" not in shown
