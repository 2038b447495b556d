"""OpenAI's `n` without sockets or a model (dialects/choices.py and the OpenAI shapes): the
choices' requests and seeds, the bounds of `n`, the stream of several choices (one choice a
chunk, a finish each, the usage summed once after the last), a choice that fails failing the
request (OpenAI's choices have no error of their own). The real engine runs them in tests/e2e/test_choices.py."""

from __future__ import annotations

import queue
from types import SimpleNamespace

import orjson
import pytest

from localserve.dialects.choices import (Choices, choice_requests, read_choices, refuse_choices,
                                         wait_for_choices)
from localserve.dialects.limits import MAX_CHOICES
from localserve.dialects.openai.chat import ChatChunks, final_response
from localserve.dialects.openai.completions import CompletionChunks, final_response as completion_final
from localserve.errors import ApiError
from localserve.generation import (ActiveGeneration, ChoiceEvent, ChoiceEvents, Chunk, Context, Finished,
                                   GenerationFailure, GenerationOutput, GenerationRequest, NoAllowedToken, SamplingParams)

META = {"id": "chatcmpl-1", "created": 1, "model": "m"}


def output(text: str, completion: int, prompt: int = 10, cached: int = 0) -> GenerationOutput:
    return GenerationOutput(content=text, completion_tokens=completion, prompt_tokens=prompt, cached_tokens=cached,
                            finish_reason="length")


def frames(shape, events) -> list[dict | bytes]:
    out = []
    for event in events:
        for frame in shape.feed(event):
            payload = frame.removeprefix(b"data: ").strip()
            out.append(orjson.loads(payload))
    return out


# ---- the choices' requests ---------------------------------------------------------------

def test_each_choice_gets_seed_plus_its_index_and_one_group():
    request = GenerationRequest([1, 2, 3], sampling=SamplingParams(seed=41, temperature=0.7), stop=["x"])
    choices = choice_requests(request, 3)
    assert [c.sampling.seed for c in choices] == [41, 42, 43]
    assert [c.sampling.temperature for c in choices] == [0.7] * 3
    assert len({c.choice_group for c in choices}) == 1 and choices[0].choice_group is not None
    assert all(c.prompt_tokens == [1, 2, 3] and c.stop == ["x"] for c in choices)
    assert request.sampling.seed == 41 and request.choice_group is None        # the request itself untouched
    assert choice_requests(request, 2)[0].choice_group != choices[0].choice_group     # a group per request


def test_without_a_seed_each_choice_draws_its_own():
    assert [c.sampling.seed for c in choice_requests(GenerationRequest([1]), 2)] == [None, None]


def model(slots: int = 4, max_queue: int = 64):
    return SimpleNamespace(settings=SimpleNamespace(slots=slots, max_queue=max_queue))


@pytest.mark.parametrize("value", [0, -1, MAX_CHOICES + 1, 1.5, "2", True, [2]])
def test_bad_n_is_invalid_naming_n(value):
    with pytest.raises(ApiError) as refused:
        read_choices({"n": value}, model())
    assert refused.value.status == 400 and refused.value.param == "n"


def test_n_from_one_to_the_limit_and_within_slots_and_queue():
    assert read_choices({}, model()) == 1
    assert read_choices({"n": None}, model()) == 1
    assert read_choices({"n": MAX_CHOICES}, model()) == MAX_CHOICES
    assert read_choices({"n": 6}, model(slots=4, max_queue=2)) == 6      # two wait for a slot
    with pytest.raises(ApiError) as refused:
        read_choices({"n": 7}, model(slots=4, max_queue=2))             # these could never all be queued
    assert refused.value.param == "n" and "--slots" in refused.value.message


def test_dialects_without_n_refuse_several_and_take_one():
    refuse_choices({}, "no n")
    refuse_choices({"n": 1}, "no n")
    with pytest.raises(ApiError) as refused:
        refuse_choices({"n": 2}, "no n")
    assert refused.value.param == "n" and refused.value.status == 400


# ---- a stream of several choices ---------------------------------------------------------

def test_every_chunk_carries_one_choice_each_ends_alone_and_usage_is_summed_once():
    shape = ChatChunks(META, include_usage=True, choices=2)
    events = [ChoiceEvent(0, Context(0, 100)), ChoiceEvent(1, Context(9, 100)),
              ChoiceEvent(0, Chunk(False, "a")), ChoiceEvent(1, Chunk(False, "b")),
              ChoiceEvent(1, Finished(output("b", 3, cached=9))), ChoiceEvent(0, Chunk(False, "c"))]
    out = frames(shape, events)
    assert not shape.done
    out += frames(shape, [ChoiceEvent(0, Finished(output("ac", 5)))])
    assert shape.done
    *chunks, last = out
    assert all(len(c["choices"]) == 1 for c in chunks)
    by_index = {i: [c["choices"][0] for c in chunks if c["choices"][0]["index"] == i] for i in (0, 1)}
    assert [c["delta"] for c in by_index[0]] == [{"role": "assistant", "content": ""}, {"content": "a"},
                                                 {"content": "c"}, {}]
    assert [c["finish_reason"] for c in by_index[1]] == [None, None, "length"]
    assert last["choices"] == [] and last["usage"]["prompt_tokens"] == 10          # the prompt once
    assert last["usage"]["completion_tokens"] == 8 and last["usage"]["total_tokens"] == 18
    assert last["usage"]["prompt_tokens_details"]["cached_tokens"] == 0      # the first choice computed it


def test_a_failed_choice_ends_the_stream_with_its_error():
    """OpenAI's choices have no error of their own (the SDKs refuse a finish_reason "error"): the
    first choice to fail ends the stream with the error event, nothing of it before."""
    for shape in (ChatChunks(META, include_usage=True, choices=2),
                  CompletionChunks(META, include_usage=True, echo="> ", choices=2)):
        out = frames(shape, [ChoiceEvent(0, Chunk(False, "ok")),
                             ChoiceEvent(1, Finished(error=GenerationFailure("sampling failed")))])
        assert shape.done and out[-1]["error"]["message"] == "sampling failed" and "choices" not in out[-1]
        assert all(c["choices"][0]["index"] == 0 and c["choices"][0]["finish_reason"] is None for c in out[:-1])


def test_every_choice_failing_ends_the_stream_with_the_first_error():
    shape = ChatChunks(META, include_usage=True, choices=2)
    out = frames(shape, [ChoiceEvent(i, Finished(error=NoAllowedToken(f"broken {i}"))) for i in (1, 0)])
    assert shape.done and out[0]["error"]["message"] == "broken 1" and "choices" not in out[0]


def test_one_choice_streams_as_before():
    shape = ChatChunks(META, include_usage=True)
    out = frames(shape, [Chunk(False, "x"), Finished(output("x", 1))])
    assert [c["choices"][0]["index"] for c in out[:-1]] == [0, 0, 0] and out[-1]["usage"]["completion_tokens"] == 1


def test_completion_choices_each_echo_the_prompt_and_count_their_own_offsets():
    shape = CompletionChunks(META, include_usage=False, echo="Say: ", choices=2)
    entry = {"token": "ab", "logprob": -1.0, "top_logprobs": []}
    out = frames(shape, [ChoiceEvent(0, Chunk(False, "ab", [entry])), ChoiceEvent(1, Chunk(False, "ab", [entry])),
                         ChoiceEvent(0, Chunk(False, "ab", [entry])), ChoiceEvent(0, Finished(output("abab", 2))),
                         ChoiceEvent(1, Finished(output("ab", 1)))])
    texts = {0: "", 1: ""}
    for c in out:
        texts[c["choices"][0]["index"]] += c["choices"][0]["text"]
    assert texts == {0: "Say: abab", 1: "Say: ab"}
    offsets = [c["choices"][0]["logprobs"]["text_offset"] for c in out if c["choices"][0]["logprobs"]]
    assert offsets == [[0], [0], [2]]
    assert [c["choices"][0]["finish_reason"] for c in out][-2:] == ["length", "length"]


# ---- whole answers -----------------------------------------------------------------------

def test_a_whole_answer_has_every_choice_in_order():
    ends = [Finished(output("a", 2)), Finished(output("b", 1)), Finished(output("c", 4, cached=9))]
    answer = final_response(ends, META, False)
    assert [c["index"] for c in answer["choices"]] == [0, 1, 2]
    assert [c["message"]["content"] for c in answer["choices"]] == ["a", "b", "c"]
    assert answer["usage"]["completion_tokens"] == 7 and answer["usage"]["prompt_tokens"] == 10
    assert answer["timings"]["prompt_n"] == 10 + 10 + 1 and answer["timings"]["predicted_n"] == 7
    legacy = completion_final(ends, META, False, echo="> ")
    assert [c["text"] for c in legacy["choices"]] == ["> a", "> b", "> c"]


class Quiet:
    def peer_closed(self) -> bool:
        return False


def choices_with(ends: list[Finished]) -> Choices:
    shared: queue.SimpleQueue = queue.SimpleQueue()
    gens = [ActiveGeneration(GenerationRequest([1]), ChoiceEvents(shared, i)) for i in range(len(ends))]
    for gen, end in reversed(list(zip(gens, ends))):       # they may end in any order
        gen.events.put(end)
    return Choices(gens, shared)


def test_waiting_for_choices_gives_their_ends_in_order_unless_one_failed():
    ends = [Finished(output("a", 1)), Finished(output("b", 2))]
    assert wait_for_choices(Quiet(), choices_with(ends)) == ends
    with pytest.raises(ApiError) as caught:
        wait_for_choices(Quiet(), choices_with([Finished(output("a", 1)), Finished(error=NoAllowedToken("x"))]))
    assert caught.value.status == 400 and caught.value.message == "x"


def test_cancelling_the_choices_cancels_every_job():
    choices = choices_with([Finished(output("a", 1))] * 3)
    choices.cancel("client went away")
    assert all(gen.cancelled for gen in choices.gens) and choices.cancelled
