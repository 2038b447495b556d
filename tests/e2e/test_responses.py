"""OpenAI Responses API through the openai SDK in strict mode, on the real engine.

The tiny models write noise; where a test needs particular text or tool calls it forces them
with a GBNF grammar (or tool_choice, which the server turns into one) through the real sampler.
"""

from __future__ import annotations

import json
import re

import openai
import pytest

from rawhttp import post_json, request
from responses_support import (NO_EOG, WEATHER, call_text, check_event_stream, client, forced,
                               get_json, hermes_model, qwen3_model, start)
from sse import parse_sse


@pytest.fixture(scope="module")
def hermes(models_dir, tmp_path_factory):
    srv = start(hermes_model(models_dir), tmp_path_factory.mktemp("responses-data"), "--slots", "2")
    yield srv
    srv.stop()


@pytest.fixture
def c(hermes):
    return client(hermes)


def create(c, **kwargs):
    kwargs.setdefault("model", "anything")
    kwargs.setdefault("input", "Say hello")
    return c.responses.create(**kwargs)


def raw_stream(port: int, body: dict):
    resp = request(port, post_json("/v1/responses", {**body, "stream": True}), timeout=60)
    assert resp.status == 200 and resp.header("content-type") == "text/event-stream"
    return parse_sse(resp.body)


# ---- create ------------------------------------------------------------------------------

def test_create_returns_a_complete_response_object(c):
    r = create(c, instructions="Be brief.", metadata={"k": "v"}, extra_body=forced("Hello, world!"))
    assert r.object == "response" and r.id.startswith("resp_") and r.status == "completed"
    assert r.model == "tiny" and r.output_text == "Hello, world!"
    message = r.output[0]
    assert message.type == "message" and message.role == "assistant" and message.status == "completed"
    assert message.content[0].annotations == [] and message.content[0].logprobs == []
    assert r.instructions == "Be brief." and r.metadata == {"k": "v"}
    assert r.tools == [] and r.tool_choice == "auto" and r.parallel_tool_calls is True
    assert r.store is True and r.background is False and r.previous_response_id is None
    assert r.text.format.type == "text" and r.truncation == "disabled"
    assert r.error is None and r.incomplete_details is None and r.completed_at
    usage = r.usage
    details = usage.input_tokens_details
    assert details.cached_tokens + details.cache_write_tokens == usage.input_tokens
    assert usage.output_tokens > 0 and usage.output_tokens_details.reasoning_tokens == 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_max_output_tokens_makes_it_incomplete(c):
    r = create(c, max_output_tokens=3, extra_body={"logit_bias": NO_EOG})
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3 and r.output[0].status == "incomplete"
    assert r.max_output_tokens == 3


def test_sampling_fields_and_extensions_are_accepted(c):
    r = create(c, temperature=0.5, top_p=0.9, max_output_tokens=4,
               extra_body={"top_k": 5, "min_p": 0.1, "seed": 7, "repeat_penalty": 1.1,
                           "chat_template_kwargs": {"x": 1}})
    assert r.temperature == 0.5 and r.top_p == 0.9 and r.usage.output_tokens <= 4


def test_json_schema_format_constrains_the_output(c):
    schema = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
              "required": ["answer"], "additionalProperties": False}
    r = create(c, text={"format": {"type": "json_schema", "name": "verdict", "schema": schema, "strict": True}})
    assert json.loads(r.output_text)["answer"] in ("yes", "no")
    assert r.text.format.type == "json_schema" and r.text.format.name == "verdict"


def test_output_text_logprobs_when_included(c):
    r = create(c, include=["message.output_text.logprobs"], top_logprobs=2, max_output_tokens=3,
               extra_body={"logit_bias": NO_EOG})
    logprobs = r.output[0].content[0].logprobs
    assert len(logprobs) == 3
    assert all(len(entry.top_logprobs) == 2 and entry.logprob <= 0 for entry in logprobs)


# ---- streaming ----------------------------------------------------------------------------

def test_sdk_stream_helper_and_final_response(c):
    with c.responses.stream(model="x", input="Say hello", extra_body=forced("Hi there")) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    assert types[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert types[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert final.output_text == "Hi there" and final.status == "completed"
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hi there"
    assert c.responses.retrieve(final.id).output_text == "Hi there"


def test_raw_stream_has_event_lines_sequence_numbers_and_one_terminal_event(hermes):
    events = raw_stream(hermes.port, {"input": "hi", "grammar": 'root ::= "One two three"'})
    check_event_stream(events)
    types = [d["type"] for _, d in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    deltas = [d for _, d in events if d["type"] == "response.output_text.delta"]
    assert len(deltas) > 1 and all(d["logprobs"] == [] and d["content_index"] == 0 for d in deltas)
    done = next(d for _, d in events if d["type"] == "response.output_text.done")
    assert done["text"] == "One two three" and done["logprobs"] == []
    assert events[0][1]["response"]["status"] == "in_progress"


def test_stored_events_replay_with_starting_after(hermes):
    events = raw_stream(hermes.port, {"input": "hi", "grammar": 'root ::= "replay me"'})
    response_id = events[0][1]["response"]["id"]
    replayed = parse_sse(get_json(hermes.port, f"/v1/responses/{response_id}?stream=true").body)
    assert [d for _, d in replayed] == [d for _, d in events]
    later = parse_sse(get_json(hermes.port, f"/v1/responses/{response_id}?stream=true&starting_after=3").body)
    check_event_stream(later, first=4)


def test_sdk_follows_a_stored_stream_by_id(c):
    r = create(c, extra_body=forced("again"))
    with c.responses.stream(response_id=r.id) as stream:
        assert stream.get_final_response().output_text == "again"


# ---- tools ---------------------------------------------------------------------------------

def test_tool_loop_with_function_call_output(c):
    first = create(c, input="Weather in Paris?", tools=[WEATHER], tool_choice="required")
    assert first.status == "completed" and [o.type for o in first.output] == ["function_call"]
    call = first.output[0]
    assert call.name == "get_weather" and call.call_id and call.status == "completed"
    assert "city" in json.loads(call.arguments)
    assert first.tools[0].name == "get_weather" and first.tool_choice == "required"

    second = create(c, previous_response_id=first.id, tools=[WEATHER],
                    input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny, 21 C"}],
                    extra_body=forced("It is sunny."))
    assert second.output_text == "It is sunny." and second.previous_response_id == first.id
    items = list(c.responses.input_items.list(second.id))
    assert [i.type for i in items] == ["function_call_output"] and items[0].output == "sunny, 21 C"

    # The same loop without stored state: the client sends the whole history back.
    history = [{"role": "user", "content": "Weather in Paris?"}, call.model_dump(exclude_none=True),
               {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}]
    third = create(c, input=history, tools=[WEATHER], store=False, extra_body=forced("Sunny."))
    assert third.output_text == "Sunny." and third.store is False


def test_named_tool_choice_streams_arguments_as_generated(hermes):
    events = raw_stream(hermes.port, {"input": "Weather?", "tools": [WEATHER],
                                      "tool_choice": {"type": "function", "name": "get_weather"}})
    check_event_stream(events)
    data = [d for _, d in events]
    added = next(d for d in data if d["type"] == "response.output_item.added")
    assert added["item"]["type"] == "function_call" and added["item"]["arguments"] == ""
    assert added["item"]["status"] == "in_progress"
    deltas = [d["delta"] for d in data if d["type"] == "response.function_call_arguments.delta"]
    done = next(d for d in data if d["type"] == "response.function_call_arguments.done")
    assert len(deltas) > 1 and "".join(deltas) == done["arguments"] and done["name"] == "get_weather"
    item_done = next(d for d in data if d["type"] == "response.output_item.done")
    assert item_done["item"]["arguments"] == done["arguments"] and item_done["item"]["status"] == "completed"
    final = data[-1]["response"]
    assert final["output"][0]["call_id"] == added["item"]["call_id"]


TWO_CALLS = {"grammar": "root ::= " + json.dumps(call_text("get_weather", {"city": "Paris"})) + ' "\\n" '
                        + json.dumps(call_text("get_weather", {"city": "Rome"}))}


def test_parallel_calls_come_back_as_separate_items(c):
    r = create(c, input="Weather in Paris and Rome?", tools=[WEATHER], extra_body=TWO_CALLS)
    assert [(o.type, json.loads(o.arguments)["city"]) for o in r.output] == [
        ("function_call", "Paris"), ("function_call", "Rome")]
    assert len({o.call_id for o in r.output}) == 2


def test_parallel_tool_calls_false_with_two_calls_fails_the_response(c, hermes):
    r = create(c, input="Weather?", tools=[WEATHER], parallel_tool_calls=False, temperature=0, extra_body=TWO_CALLS)
    assert r.status == "failed" and r.error.code == "server_error"
    assert "parallel_tool_calls" in r.error.message and r.parallel_tool_calls is False
    assert c.responses.retrieve(r.id).status == "failed"

    resp = request(hermes.port, post_json("/v1/responses", {"input": "Weather?", "tools": [WEATHER],
                                                            "parallel_tool_calls": False, "stream": True,
                                                            "temperature": 0, **TWO_CALLS}), timeout=60)
    events = parse_sse(resp.body)
    check_event_stream(events)
    assert events[-1][1]["type"] == "response.failed"
    assert events[-1][1]["response"]["error"]["code"] == "server_error"
    # The job was stopped at the second call's start, not run to the grammar's end: its own line says
    # so. Greedy, the same forced text comes out in the same tokens as when both calls are allowed.
    both_calls = create(c, input="Weather?", tools=[WEATHER], temperature=0, extra_body=TWO_CALLS)
    assert len(both_calls.output) == 2
    for request_id in (r._request_id, resp.header("request-id")):
        line = hermes.wait_cancelled(request_id, "while parallel_tool_calls is false")
        assert line, request_id
        assert int(re.search(r"after (\d+) tokens", line).group(1)) < both_calls.usage.output_tokens


def test_tool_choice_none_keeps_calls_out(c):
    r = create(c, tools=[WEATHER], tool_choice="none", extra_body=forced("no tools"))
    assert r.output_text == "no tools" and r.tool_choice == "none"


# ---- stored state: chains, retrieve, delete, input items ---------------------------------------

def test_previous_response_id_chain_reuses_the_prompt_cache(c):
    first = create(c, input="Remember the number seven, please.", extra_body=forced("Noted."))
    second = create(c, input="Which number?", previous_response_id=first.id, extra_body=forced("Seven."))
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens > 0
    third = create(c, input="Sure?", previous_response_id=second.id, extra_body=forced("Yes."))
    assert third.usage.input_tokens > second.usage.input_tokens
    assert third.usage.input_tokens_details.cached_tokens >= second.usage.input_tokens - 1
    assert [i.content[0].text for i in c.responses.input_items.list(third.id)] == ["Sure?"]


def test_retrieve_delete_and_input_items_paging(c, hermes):
    texts = [f"message {n}" for n in range(5)]
    r = create(c, input=[{"role": "user", "content": t} for t in texts], max_output_tokens=2)
    assert c.responses.retrieve(r.id).model_dump() == r.model_dump()

    assert [i.content[0].text for i in c.responses.input_items.list(r.id, limit=2, order="asc")] == texts
    assert [i.content[0].text for i in c.responses.input_items.list(r.id)] == texts[::-1]   # desc by default
    page = get_json(hermes.port, f"/v1/responses/{r.id}/input_items?limit=2&order=asc").json()
    assert page["object"] == "list" and page["has_more"] is True and len(page["data"]) == 2
    assert page["first_id"] == page["data"][0]["id"] and page["last_id"] == page["data"][1]["id"]
    rest = get_json(hermes.port, f"/v1/responses/{r.id}/input_items?order=asc&after={page['last_id']}").json()
    assert [i["content"][0]["text"] for i in rest["data"]] == texts[2:] and rest["has_more"] is False

    assert c.responses.delete(r.id) is None
    for call in (lambda: c.responses.retrieve(r.id), lambda: c.responses.input_items.list(r.id),
                 lambda: c.responses.delete(r.id)):
        with pytest.raises(openai.NotFoundError):
            call()


def test_store_false_is_not_kept(c):
    r = create(c, store=False, max_output_tokens=2)
    assert r.store is False
    with pytest.raises(openai.NotFoundError):
        c.responses.retrieve(r.id)


def test_unknown_ids_are_404_in_openai_shape(hermes):
    for method, path in (("GET", "/v1/responses/resp_nope"), ("DELETE", "/v1/responses/resp_nope"),
                         ("POST", "/v1/responses/resp_nope/cancel"),
                         ("GET", "/v1/responses/resp_nope/input_items"),
                         ("GET", "/v1/responses/resp_nope?stream=true")):
        head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n\r\n"
        resp = request(hermes.port, head.encode())
        assert resp.status == 404, path
        error = resp.json()["error"]
        assert error["type"] == "invalid_request_error" and "resp_nope" in error["message"]
        assert error["code"] == "response_not_found"
    for field, code in (("previous_response_id", "previous_response_not_found"),
                        ("conversation", "conversation_not_found")):
        resp = request(hermes.port, post_json("/v1/responses", {"input": "hi", field: "x_nope"}))
        assert resp.status == 404 and resp.json()["error"]["code"] == code


def test_cancelling_a_finished_response_is_400(c):
    r = create(c, max_output_tokens=2)
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.cancel(r.id)
    assert info.value.body["code"] == "response_already_completed"


# ---- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("body,param,code", [
    ({"stream": True, "background": True}, "background", "incompatible_parameters"),
    ({"previous_response_id": "resp_x", "conversation": "conv_x"}, "previous_response_id",
     "mutually_exclusive_parameters"),
    ({"background": True, "store": False}, "background", None),
    ({"tools": [{"type": "fucntion", "name": "f"}]}, "tools", "unsupported_value"),
    ({"tools": [{"type": "custom"}]}, "tools[0].name", None),
    ({"tools": [{"type": 5}]}, "tools[0].type", None),
    ({"tools": [{"type": "function", "name": "f"}, {"type": "function", "name": "f"}]}, "tools", None),
    ({"tool_choice": {"type": "custom", "name": "f"}, "tools": [WEATHER]}, "tool_choice", None),
    ({"input": [{"type": "custom_tool_call", "call_id": "c", "name": "f"}]}, "input[0].input", None),
    ({"input": [{"type": "local_shell_call", "call_id": "c", "action": {"command": "ls"}}]}, "input[0].action",
     None),
    ({"input": [{"type": "reasoning", "encrypted_content": 5}]}, "input[0].encrypted_content", None),
    ({"tools": [{"type": "namespace", "name": "ns", "tools": [{"type": "web_search"}]}]}, "tools[0].tools[0]",
     None),
    ({"tools": [{"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "ebnf",
                                                           "definition": "x"}}]}, "tools[0].format", None),
    ({"tools": [{"type": "function"}]}, "tools[0]", None),
    ({"tool_choice": "sometimes"}, "tool_choice", None),
    ({"tool_choice": {"type": "function", "name": "nope"}, "tools": [WEATHER]}, "tool_choice", None),
    ({"tool_choice": {"type": "web_search_preview"}}, "tool_choice", None),
    ({"tool_choice": "required"}, "tool_choice", None),
    ({"max_output_tokens": 0}, "max_output_tokens", None),
    ({"temperature": 5}, "temperature", None),
    ({"top_p": "high"}, "top_p", None),
    ({"text": {"format": {"type": "xml"}}}, "text.format", None),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema", None),
    ({"reasoning": {"effort": "extreme"}}, "reasoning.effort", None),
    ({"reasoning": {"summary": "long"}}, "reasoning.summary", None),
    ({"truncation": "sometimes"}, "truncation", None),
    ({"input": 5}, "input", None),
    ({"input": []}, "input", None),
    ({"input": [{"type": "web_search_call", "id": "x"}]}, "input[0].type", None),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
     "input[0].content[0]", "invalid_image"),
    ({"input": [{"role": "user", "content": [{"type": "input_video", "video_url": "x"}]}]},
     "input[0].content[0].type", None),
    ({"input": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]},     # audio: issue 49
     "input[0].content[0].input_audio.format", None),
    ({"input": [{"role": "robot", "content": "hi"}]}, "input[0].role", None),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id", None),
    ({"metadata": {"k": 5}}, "metadata", None),
    ({"include": "everything"}, "include", None),
    ({"store": "yes"}, "store", None),
    ({"grammar": "root ::= ("}, "grammar", "invalid_grammar"),
    ({"logit_bias": {"99999999": 1}}, "logit_bias", None),
    ({"prompt": {"id": "pmpt_1"}}, "prompt", None),
])
def test_bad_requests_are_400_naming_the_param(hermes, body, param, code):
    body = {"input": "hi", **body}
    resp = request(hermes.port, post_json("/v1/responses", body))
    assert resp.status == 400, resp.body
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["message"]
    assert error["param"] == param
    if code:
        assert error["code"] == code
    if "fucntion" in json.dumps(body.get("tools")):
        assert "fucntion" in error["message"]


def test_context_overflow_with_truncation_disabled_and_auto(hermes, c):
    history = [{"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " + "word " * 300}
               for n in range(12)] + [{"role": "user", "content": "last question"}]
    resp = request(hermes.port, post_json("/v1/responses", {"input": history}))
    assert resp.status == 400
    error = resp.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert error["n_prompt_tokens"] > error["n_ctx"]
    # end-of-generation banned: random weights may otherwise end the answer inside two tokens
    r = create(c, input=history, truncation="auto", max_output_tokens=2, extra_body={"logit_bias": NO_EOG})
    assert r.status == "incomplete" and r.truncation == "auto"
    assert r.usage.input_tokens < error["n_ctx"]
    assert len(list(c.responses.input_items.list(r.id, limit=100))) == len(history)   # stored whole


# ---- reasoning -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qwen3(models_dir, tmp_path_factory):
    srv = start(qwen3_model(models_dir), tmp_path_factory.mktemp("responses-qwen3"))
    yield srv
    srv.stop()


THINK = forced("Two and two.\n</think>\n\nThe answer is 4.")


def test_reasoning_text_parts_by_default(qwen3):
    c = client(qwen3)
    r = create(c, input="2+2?", extra_body=THINK)
    reasoning, message = r.output
    assert reasoning.type == "reasoning" and reasoning.summary == []
    assert reasoning.content[0].type == "reasoning_text" and reasoning.content[0].text.strip() == "Two and two."
    assert message.content[0].text == "The answer is 4." and r.output_text == "The answer is 4."
    assert r.usage.output_tokens_details.reasoning_tokens > 0
    events = raw_stream(qwen3.port, {"input": "2+2?", **THINK})
    check_event_stream(events)
    types = [d["type"] for _, d in events]
    assert "response.reasoning_text.delta" in types and "response.reasoning_summary_text.delta" not in types
    assert types.index("response.reasoning_text.done") < types.index("response.output_text.delta")


def test_reasoning_summary_parts_when_asked(qwen3):
    c = client(qwen3)
    with c.responses.stream(model="x", input="2+2?", reasoning={"effort": "low", "summary": "auto"},
                            extra_body=THINK) as stream:
        events = list(stream)
        final = stream.get_final_response()
    types = [e.type for e in events]
    for kind in ("response.reasoning_summary_part.added", "response.reasoning_summary_text.delta",
                 "response.reasoning_summary_text.done", "response.reasoning_summary_part.done"):
        assert kind in types
    assert "response.reasoning_text.delta" not in types
    reasoning = final.output[0]
    assert reasoning.summary[0].type == "summary_text" and reasoning.summary[0].text.strip() == "Two and two."
    assert final.reasoning.summary == "auto" and final.reasoning.effort == "low"
    assert final.output_text == "The answer is 4."
    # reasoning items are accepted back as input
    follow = create(c, input=[{"role": "user", "content": "2+2?"}, reasoning.model_dump(exclude_none=True),
                              final.output[1].model_dump(exclude_none=True),
                              {"role": "user", "content": "and 3+3?"}], extra_body=THINK)
    assert follow.status == "completed"

