"""The markup real templates write around an answer (functionary v3.2's `all` channel, Kimi K3's
response frame, Solar Open's `<|content|>` after its `<|think|>` reasoning, Command R7B's
response tags) goes to nobody: a model writing a turn exactly as its template renders one gets
its reasoning as reasoning and its answer as content, whole and streamed in small pieces,
through the runtime's own text stages."""

from __future__ import annotations

import pytest

from template_calls import template

from localserve.generation import Chunk, GenerationRequest
from localserve.parsing.content_markup import detect_content_markup
from localserve.parsing.reasoning import detect_reasoning, prompt_opens_reasoning
from localserve.runtime.textstream import OutputPipeline

THOUGHT, ANSWER = "Let me look.", "It is sunny."
ASKED = [{"role": "user", "content": "Weather?"}]
# the template: the field it reads an earlier turn's reasoning from (None: it shows none), and the
# token that ends the model's turn (generation stops on it)
TEMPLATES = {"meetkai-functionary-medium-v3.2": (None, "<|eot_id|>"),
             "Kimi-K3": ("reasoning_content", "<|end_of_msg|>"),
             "upstage-Solar-Open-100B": ("reasoning", "<|end|>"),
             "CohereForAI-c4ai-command-r7b-12-2024-tool_use": (None, "<|END_OF_TURN_TOKEN|>")}


def _written(name: str) -> tuple[str, str]:
    """(the generation prompt, what a model following its template writes after it): the
    template's own last assistant turn, less its end-of-turn token (generation stops on it)."""
    chat, (field, end) = template(name), TEMPLATES[name]
    prompt = chat.render_as_is(ASKED, add_generation_prompt=True)
    turn = {"role": "assistant", "content": ANSWER, **({field: THOUGHT} if field else {})}
    whole = chat.render_as_is(ASKED + [turn], add_generation_prompt=False)
    n = 0
    while n < min(len(prompt), len(whole)) and prompt[n] == whole[n]:
        n += 1
    if whole.rfind("<", 0, n) > whole.rfind(">", 0, n):  # not inside a marker
        n = whole.rfind("<", 0, n)
    return prompt, whole[n:whole.rindex(end)]


def _split(name: str, prompt: str, text: str, size: int) -> tuple[str, str]:
    source = template(name).text
    fmt = detect_reasoning(source, prompt)
    request = GenerationRequest(prompt_tokens=[], reasoning=fmt,
                                reasoning_starts_inside=prompt_opens_reasoning(fmt, prompt),
                                content_markup=detect_content_markup(source))
    pipeline = OutputPipeline(request)
    events = []
    data = text.encode()
    for at in range(0, len(data), size):
        events += pipeline.feed(data[at:at + size])
    events += pipeline.finish()
    reasoning = "".join(e.text for e in events if isinstance(e, Chunk) and e.reasoning)
    content = "".join(e.text for e in events if isinstance(e, Chunk) and not e.reasoning)
    return reasoning, content


@pytest.mark.parametrize("size", [1, 3, 1000])
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_the_answer_comes_without_the_templates_markup(name, size):
    prompt, text = _written(name)
    assert ANSWER in text and text != ANSWER          # the template frames it in markup of its own
    reasoning, content = _split(name, prompt, text, size)
    assert content.strip() == ANSWER, text
    if TEMPLATES[name][0] and THOUGHT in text:
        assert reasoning == THOUGHT, text


def test_functionary_answers_on_a_later_all_channel_too():
    prompt, _ = _written("meetkai-functionary-medium-v3.2")
    assert _split("meetkai-functionary-medium-v3.2", prompt, "all\nHello.>>>all\nMore.", 2)[1] == "Hello.More."
    # text that only starts like the channel's name is the answer's own
    assert _split("meetkai-functionary-medium-v3.2", prompt, "alligators", 1)[1] == "alligators"
