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
             "CohereForAI-c4ai-command-r7b-12-2024-tool_use": (None, "<|END_OF_TURN_TOKEN|>"),
             "Cohere2MoE": (None, "<|END_OF_TURN_TOKEN|>")}


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
    # (a turn from history may leave out the reasoning the prompt opens: then it starts outside)
    inside = prompt_opens_reasoning(fmt, prompt) and fmt.end in text
    request = GenerationRequest(prompt_tokens=[], reasoning=fmt, reasoning_starts_inside=inside,
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


FUNCTIONARY = "meetkai-functionary-medium-v3.2"


def _functionary(text: str, size: int):
    """(content, calls) of functionary v3.2's output after its real generation prompt, which ends in `>>>`."""
    from localserve.generation import ToolCallStart, ToolSpec
    from localserve.models.loaded import detect_chat_family
    from localserve.parsing.tools import marker_prompt_opened
    chat = template(FUNCTIONARY)
    family = detect_chat_family(chat)
    prompt = chat.render_as_is(ASKED, tools=[{"type": "function", "function": {"name": "get_weather"}}],
                               add_generation_prompt=True)
    tools = ToolSpec(family, {"get_weather": {}, "get_time": {}}, starts_inside=bool(marker_prompt_opened(family, prompt)))
    assert tools.starts_inside
    pipeline = OutputPipeline(GenerationRequest(prompt_tokens=[], tools=tools,
                                                content_markup=detect_content_markup(chat.text)))
    events = []
    for at in range(0, len(text), size):
        events += pipeline.feed(text[at:at + size].encode())
    events += pipeline.finish()
    assert [e.name for e in events if isinstance(e, ToolCallStart)] == [c.name for c in pipeline.tool_calls]
    return "".join(pipeline.content), [(c.name, c.arguments) for c in pipeline.tool_calls]


@pytest.mark.parametrize("size", [1, 4, 1000])
def test_functionary_calls_right_after_the_prompts_marker(size):
    """The prompt wrote `>>>`: a call's name may open the output; the answer's `all` channel
    and the prompt's marker are nobody's content."""
    text = 'get_weather\n{"city": "Paris"}>>>get_time\n{"zone": "UTC"}'
    assert _functionary(text, size) == ("", [("get_weather", '{"city":"Paris"}'), ("get_time", '{"zone":"UTC"}')])
    assert _functionary('all\nLet me look.>>>get_time\n{"zone": "UTC"}', size) == (
        "Let me look.", [("get_time", '{"zone":"UTC"}')])
    assert _functionary("all\nHello there", size) == ("Hello there", [])
    assert _functionary("Hello there", size) == ("Hello there", [])


def test_functionary_forced_calls_leave_out_the_marker_the_prompt_wrote():
    """The forced-call grammar after functionary's `>>>`: the first call starts with its name."""
    from localserve.grammar.grammar import tool_call_grammar
    from localserve.models.loaded import detect_chat_family
    family = detect_chat_family(template(FUNCTIONARY))
    tools = [{"name": "get_weather", "parameters": {"type": "object", "properties": {}}}]
    grammar = tool_call_grammar(family, tools, parallel=True, opened=">>>")
    root = grammar.splitlines()[0]
    first = next(line for line in grammar.splitlines() if line.startswith("first-call ::="))
    assert root.startswith("root ::= first-call") and first.startswith('first-call ::= "get_weather')
    assert '">>>get_weather' in next(line for line in grammar.splitlines() if line.startswith("call ::="))
