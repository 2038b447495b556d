"""prompt/room.py: a conversation that cannot fit is refused before, or while, it is rendered.

The turn bound rests on a claim about templates: each turn (a user or assistant message after
one of the other role) is shown with a marker of its own, empty content included. The first
test checks it on every template of llama.cpp's corpus and on the built-in ones.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from template_corpus import corpus_names, corpus_templates  # noqa: E402

from localserve.conversation import text_message  # noqa: E402
from localserve.generation import ContextOverflow, PromptRefused  # noqa: E402
from localserve.models.loaded import detect_chat_family  # noqa: E402
from localserve.prompt.build import ChatInput, render_chat  # noqa: E402
from localserve.prompt.jinja_env import OutputTooLong, render  # noqa: E402
from localserve.prompt.room import MAX_TOKENIZE_BYTES, RenderLimit, sent_roles, turns  # noqa: E402
from localserve.prompt.templates import BUILTIN_TEMPLATES, ChatTemplate  # noqa: E402


def conversation(*contents: str) -> list:
    return [text_message("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(contents)]


def template_named(name: str) -> ChatTemplate:
    text = BUILTIN_TEMPLATES[name[len("builtin:"):]] if name.startswith("builtin:") else corpus_templates()[name]
    template = ChatTemplate(name, text, "<s>", "</s>")
    template.calls_family = detect_chat_family(template)
    return template


def squeezed(text: str) -> str:
    return "".join(text.split())


def between(text: str, first: str, second: str) -> str:
    start = text.index(first) + len(first)
    return text[start:text.index(second, start)]


# ---- the claim the turn bound rests on --------------------------------------------------------

@pytest.mark.parametrize("name", corpus_names() + [f"builtin:{name}" for name in BUILTIN_TEMPLATES])
def test_every_turn_is_shown_with_a_marker_of_its_own_empty_or_not(name):
    template = template_named(name)
    full = render_chat(template, ChatInput(conversation("Q1", "A1", "Q2", "A2", "Q3")))
    for first, second in (("Q1", "A1"), ("A1", "Q2"), ("Q2", "A2"), ("A2", "Q3")):
        assert squeezed(between(full, first, second)), f"no marker between {first} and {second}"
    try:
        empty_answer = render_chat(template, ChatInput(conversation("Q1", "", "Q2", "A2", "Q3")))
    except PromptRefused:
        empty_answer = None         # a template that refuses an empty answer (Ministral): refused, not hidden
    if empty_answer is not None:
        # more between the questions than what follows any answer: the empty answer's own marker
        shown, after_an_answer = squeezed(between(empty_answer, "Q1", "Q2")), squeezed(between(full, "A1", "Q2"))
        assert len(shown) > len(after_an_answer), f"an empty answer left no marker: {shown!r}"
    empty_question = render_chat(template, ChatInput(conversation("Q1", "A1", "", "A2", "Q3")))
    shown, after_a_question = squeezed(between(empty_question, "A1", "A2")), squeezed(between(full, "Q2", "A2"))
    assert len(shown) > len(after_a_question), f"an empty question left no marker: {shown!r}"


# ---- turns ------------------------------------------------------------------------------------

def test_turns_count_role_changes_between_user_and_assistant_only():
    messages = [text_message(role, "x") for role in
                ("system", "user", "user", "assistant", "tool", "assistant", "system", "user", "tool", "user")]
    assert turns(m.role for m in messages) == 3
    assert turns(m.role for m in conversation(*["x"] * 7)) == 7
    assert turns([]) == 0


def test_the_roles_of_messages_not_read_yet():
    sent = [{"role": "user"}, "junk", {"role": "assistant"}, {"content": "no role"}, {"role": "user"}, 5]
    assert list(sent_roles(sent)) == ["user", None, "assistant", None, "user", None]
    assert list(sent_roles({"role": "user"})) == [] and list(sent_roles(None)) == []
    assert turns(sent_roles(sent)) == 3


LINES = "{% for m in messages %}<{{ m.role }}>{{ m.content }}\n{% endfor %}"
REFUSES_TO_RUN = "{{ raise_exception('the template ran') }}"


def test_as_many_turns_as_the_context_holds_are_refused_before_the_template_runs():
    limit = RenderLimit.to_fit(n_ctx=8, max_piece_bytes=4)
    with pytest.raises(ContextOverflow) as refused:
        render_chat(ChatTemplate("t", REFUSES_TO_RUN, "", ""), ChatInput(conversation(*[""] * 8)), limit)
    assert (refused.value.n_prompt_tokens, refused.value.n_ctx, refused.value.at_least) == (8, 8, True)
    # one fewer may fit: the template runs (and here refuses on its own)
    with pytest.raises(PromptRefused, match="the template ran"):
        render_chat(ChatTemplate("t", REFUSES_TO_RUN, "", ""), ChatInput(conversation(*[""] * 7)), limit)


def test_a_run_of_one_role_is_one_turn():
    messages = [text_message("user", "x") for _ in range(20)]
    text = render_chat(ChatTemplate("t", LINES, "", ""), ChatInput(messages), RenderLimit.to_fit(8, 100))
    assert text.count("<user>x") == 20


# ---- the text bound ---------------------------------------------------------------------------

def test_a_render_stops_as_soon_as_it_passes_max_chars():
    messages = [{"role": "user", "content": "0123456789"} for _ in range(100_000)]
    with pytest.raises(OutputTooLong) as stopped:
        render(LINES, {"messages": messages}, max_chars=100)
    assert 100 < stopped.value.chars < 200          # stopped at the part that passed, not at the end
    assert render(LINES, {"messages": messages[:3]}, max_chars=100) == "<user>0123456789\n" * 3


def test_a_render_longer_than_the_context_can_hold_is_a_context_overflow_at_least():
    limit = RenderLimit.to_fit(n_ctx=100, max_piece_bytes=3)          # at most 300 characters
    chat = ChatInput([text_message("user", "a" * 1_000_000)])
    with pytest.raises(ContextOverflow) as refused:
        render_chat(ChatTemplate("t", LINES, "", ""), chat, limit)
    assert refused.value.at_least and refused.value.n_ctx == 100 and refused.value.n_prompt_tokens > 100


def test_a_prompt_only_counted_is_refused_as_too_long_to_tokenize():
    chat = ChatInput([text_message("user", "a" * (MAX_TOKENIZE_BYTES + 1))])
    with pytest.raises(PromptRefused) as refused:
        render_chat(ChatTemplate("t", LINES, "", ""), chat, RenderLimit.to_count())
    assert refused.value.code == "text_too_long"
    assert ContextOverflow not in type(refused.value).__mro__


def test_within_the_limit_the_prompt_is_what_an_unlimited_render_gives():
    template = template_named("builtin:chatml")
    chat = ChatInput(conversation("Q1", "A1", "Q2"))
    assert render_chat(template, chat, RenderLimit.to_fit(64, 4)) == render_chat(template, chat)
