"""Context compaction through OpenAI's Responses API (issue 34), end to end on a scripted model whose
summarisation turn (the prompt's fixed last line, localserve.prompt.compaction) writes SUMMARY through
the real sampler: /v1/responses/compact, compaction_trigger items, context_management's threshold,
compaction items as input (sealed, opened, rendered as the summary), and a long chained session."""

from __future__ import annotations

import openai
import pytest

from clients import openai_sdk
from conftest import ServerProcess, slow_model
from rawhttp import post_json, request
from responses_support import check_event_stream, get_json, wait_status
from scripted_model import write_scripted_gguf
from sse import parse_sse

from localserve.prompt.compaction import SUMMARY_HEADING

ANSWER = "Hello there."
SUMMARY = "The user talked about tea and coffee."
LONG = "tea leaves and water " * 60          # a long turn: about a thousand tokens of the tiny vocabulary


@pytest.fixture(scope="module")
def server(models_dir, tmp_path_factory):
    path = write_scripted_gguf(models_dir / "compaction-scripted.gguf", [[ANSWER]], summary=[SUMMARY])
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1", "--ctx-size", "8192",
                        "--data-dir", str(tmp_path_factory.mktemp("data")))
    yield srv
    srv.stop()


def history() -> list[dict]:
    return [{"role": "user", "content": "Tell me about tea."}, {"role": "assistant", "content": LONG},
            {"role": "user", "content": "And coffee?"}]


def post(port: int, path: str, body: dict):
    return request(port, post_json(path, body), timeout=60)


def compactions(port: int) -> float:
    for line in get_json(port, "/metrics").body.decode().splitlines():
        if line.startswith("localserve_compactions_total "):
            return float(line.split()[1])
    raise AssertionError("no localserve_compactions_total in /metrics")


def rendered(port: int, body: dict) -> dict:
    answer = post(port, "/apply-template", {"model": "scripted", **body})
    assert answer.status == 200, answer.body
    return answer.json()


def test_compact_endpoint_keeps_the_user_turns_and_seals_the_summary(server):
    before = compactions(server.port)
    answer = post(server.port, "/v1/responses/compact", {"model": "scripted", "input": history()})
    assert answer.status == 200, answer.body
    body = answer.json()
    assert body["object"] == "response.compaction" and body["id"].startswith("resp")
    *kept, item = body["output"]
    assert [k["content"][0]["text"] for k in kept] == ["Tell me about tea.", "And coffee?"]
    assert set(item) == {"id", "type", "encrypted_content"} and item["type"] == "compaction"
    assert SUMMARY not in item["encrypted_content"] and "tea" not in item["encrypted_content"]
    assert body["usage"]["output_tokens"] == 1 and body["usage"]["input_tokens"] > 1000
    assert compactions(server.port) == before + 1
    # the SDK reads it (its CompactedResponse types every output message as the assistant's: not strict)
    sdk = openai_sdk(server, strict=False).responses.compact(model="scripted", input=history())
    assert sdk.output[-1].type == "compaction" and sdk.usage.output_tokens == 1

    # handed back, it renders as the summary: a short prompt that holds it and the kept turns
    follow = [*body["output"], {"role": "user", "content": "Which one is better?"}]
    compacted = rendered(server.port, {"input": follow})
    whole = rendered(server.port, {"input": [*history(), {"role": "user", "content": "Which one is better?"}]})
    assert compacted["prompt_tokens"] < whole["prompt_tokens"] // 4
    prompt = compacted["prompt"]
    assert f"{SUMMARY_HEADING}\n\n{SUMMARY}" in prompt and LONG.strip() not in prompt
    positions = [prompt.index(text) for text in ("Tell me about tea.", "And coffee?", SUMMARY, "Which one is better?")]
    assert positions == sorted(positions)


def test_a_tampered_compaction_is_a_400(server):
    item = post(server.port, "/v1/responses/compact", {"model": "scripted", "input": history()}).json()["output"][-1]
    blob = item["encrypted_content"]
    tampered = {**item, "encrypted_content": blob[:10] + ("A" if blob[10] != "A" else "B") + blob[11:]}
    c = openai_sdk(server)
    with pytest.raises(openai.BadRequestError) as failed:
        c.responses.create(model="scripted", input=[tampered, {"role": "user", "content": "Go on."}])
    assert failed.value.code == "invalid_encrypted_content" and failed.value.param == "input[0].encrypted_content"
    answer = post(server.port, "/v1/responses/compact", {"model": "scripted", "input": [tampered]})
    assert answer.status == 400 and answer.json()["error"]["code"] == "invalid_encrypted_content"
    # a compaction is not a reasoning item: one sealed for one purpose does not open as the other
    as_reasoning = {"type": "reasoning", "summary": [], "encrypted_content": blob}
    assert post(server.port, "/v1/responses", {"model": "scripted", "input": [as_reasoning, {
        "role": "user", "content": "Go on."}]}).status == 400


def trigger_input() -> list[dict]:
    return [*history(), {"type": "compaction_trigger"}]


def test_a_compaction_trigger_answers_exactly_one_compaction_item(server):
    c = openai_sdk(server)
    before = compactions(server.port)
    response = c.responses.create(model="scripted", input=trigger_input(), store=False)
    assert response.status == "completed"
    assert [item.type for item in response.output] == ["compaction"]
    assert response.usage.output_tokens == 1 and compactions(server.port) == before + 1
    # it goes on from there: the summary, then the next turn
    follow = c.responses.create(model="scripted", input=[response.output[0].model_dump(exclude_none=True),
                                                         {"role": "user", "content": "Next."}])
    assert follow.output_text == ANSWER
    assert follow.usage.input_tokens < response.usage.input_tokens // 4


def test_a_streamed_compaction_trigger_then_completed(server):
    c = openai_sdk(server)
    with c.responses.stream(model="scripted", input=trigger_input(), store=False) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [event.type for event in events]
    done = [event for event in events if event.type == "response.output_item.done"]
    assert len(done) == 1 and done[0].item.type == "compaction" and done[0].item.encrypted_content
    assert kinds[-1] == "response.completed" and kinds.index("response.output_item.done") == len(kinds) - 2
    assert "response.output_text.delta" not in kinds
    assert [item.type for item in final.output] == ["compaction"]
    raw = post(server.port, "/v1/responses", {"model": "scripted", "input": trigger_input(), "stream": True})
    check_event_stream(parse_sse(raw.body))


def management(threshold: int) -> dict:
    return {"context_management": [{"type": "compaction", "compact_threshold": threshold}]}


@pytest.mark.parametrize("stream", [False, True])
def test_a_threshold_crossed_compacts_once_and_the_chain_goes_on_from_the_summary(server, stream):
    c = openai_sdk(server)
    first = c.responses.create(model="scripted", input=[{"role": "user", "content": LONG}])
    before = compactions(server.port)
    options = {"model": "scripted", "previous_response_id": first.id, "extra_body": management(500)}
    if stream:
        with c.responses.stream(input="And now?", **options) as events:
            kinds = [(event.type, getattr(getattr(event, "item", None), "type", None)) for event in events]
            second = events.get_final_response()
        assert kinds[2:4] == [("response.output_item.added", "compaction"), ("response.output_item.done", "compaction")]
    else:
        second = c.responses.create(input="And now?", **options)
    assert [item.type for item in second.output] == ["compaction", "message"] and second.output_text == ANSWER
    assert compactions(server.port) == before + 1
    third = c.responses.create(input="Anything else?", **{**options, "previous_response_id": second.id})
    assert [item.type for item in third.output] == ["message"] and compactions(server.port) == before + 1
    # the chain after a compaction starts from its summary
    assert third.usage.input_tokens < 200 < first.usage.input_tokens
    prompt = rendered(server.port, {"input": "More?", "previous_response_id": third.id})["prompt"]
    assert SUMMARY in prompt and "And now?" not in prompt and "Anything else?" in prompt


def test_fifty_chained_turns_on_an_8k_context_all_finish(server):
    c = openai_sdk(server)
    previous, compacted = None, 0
    for turn in range(50):
        response = c.responses.create(model="scripted", input=f"Turn {turn}: " + "some words " * 40,
                                      previous_response_id=previous, extra_body=management(4000))
        assert response.status == "completed" and response.output_text == ANSWER
        compacted += response.output[0].type == "compaction"
        previous = response.id
    assert compacted >= 2


def test_a_chain_goes_on_from_its_last_compaction_not_its_first(server):
    """The second compaction of a chain is the one the next turn starts from: the turns between the
    two are left out, so the prompt stays short and compaction does not repeat."""
    c = openai_sdk(server)
    options = {"model": "scripted", "extra_body": management(500)}
    first = c.responses.create(model="scripted", input=[{"role": "user", "content": LONG}])
    second = c.responses.create(input="Second turn.", previous_response_id=first.id, **options)
    third = c.responses.create(input=LONG + " Third turn.", previous_response_id=second.id, **options)
    assert [item.type for item in second.output] == [item.type for item in third.output] == ["compaction", "message"]
    before = compactions(server.port)
    fourth = c.responses.create(input="Fourth turn?", previous_response_id=third.id, **options)
    assert [item.type for item in fourth.output] == ["message"] and compactions(server.port) == before
    assert fourth.usage.input_tokens < 200
    prompt = rendered(server.port, {"input": "More?", "previous_response_id": fourth.id})["prompt"]
    assert prompt.count(SUMMARY) == 1 and "Fourth turn?" in prompt
    assert "Third turn." not in prompt and "Second turn." not in prompt


def test_truncation_auto_compacts_instead_of_dropping_turns(server):
    c = openai_sdk(server)
    first = c.responses.create(model="scripted", input=LONG * 6)
    second = c.responses.create(model="scripted", input=LONG * 4, previous_response_id=first.id, truncation="auto")
    assert [item.type for item in second.output] == ["compaction", "message"]
    with pytest.raises(openai.BadRequestError) as failed:
        c.responses.create(model="scripted", input=LONG * 4, previous_response_id=first.id)
    assert failed.value.code == "context_length_exceeded"


def test_context_management_is_checked(server):
    bad = post(server.port, "/v1/responses", {"model": "scripted", "input": "x",
                                               "context_management": [{"type": "other"}]})
    assert bad.status == 400 and bad.json()["error"]["param"] == "context_management[0].type"
    bad = post(server.port, "/v1/responses", {"model": "scripted", "input": "x", **management(0)})
    assert bad.status == 400 and bad.json()["error"]["param"] == "context_management[0].compact_threshold"
    bad = post(server.port, "/v1/responses", {"model": "scripted", "input": [{"type": "compaction"}]})
    assert bad.status == 400 and bad.json()["error"]["param"] == "input[0].encrypted_content"


def test_a_conversation_longer_than_the_context_is_compacted_in_pieces(server):
    """Past the context even for the summarisation: the oldest turns are summarised first, then the
    rest with that summary; the user turns kept are the newest that fit a quarter of the context."""
    before = compactions(server.port)
    turns = [{"role": "user", "content": LONG * 6}, {"role": "assistant", "content": ANSWER},
             {"role": "user", "content": LONG * 6}, {"role": "assistant", "content": ANSWER},
             {"role": "user", "content": "Short question?"}]
    answer = post(server.port, "/v1/responses/compact", {"model": "scripted", "input": turns})
    assert answer.status == 200, answer.body
    body = answer.json()
    assert compactions(server.port) == before + 2 and body["usage"]["output_tokens"] == 2
    assert [item["type"] for item in body["output"]] == ["message", "compaction"]
    assert body["output"][0]["content"][0]["text"] == "Short question?"


def test_a_compaction_trigger_mid_input_leaves_every_item_its_place(server):
    """Items after a trigger are named by their places in `input` (the trigger counts); the rest
    of the input is compacted as usual."""
    unsealed = [{"type": "compaction", "encrypted_content": "not sealed here"},
                {"type": "reasoning", "summary": [], "encrypted_content": "not sealed either"}]
    for path in ("/v1/responses", "/v1/responses/compact"):
        for item in unsealed:
            answer = post(server.port, path, {"model": "scripted", "input": [
                *history(), {"type": "compaction_trigger"}, item, {"role": "user", "content": "Go on."}]})
            assert answer.status == 400, answer.body
            error = answer.json()["error"]
            assert error["code"] == "invalid_encrypted_content" and error["param"] == "input[4].encrypted_content", \
                (path, error)
    answer = post(server.port, "/v1/responses", {"model": "scripted", "store": False, "input": [
        *history(), {"type": "compaction_trigger"}, {"role": "user", "content": "Short question?"}]})
    assert answer.status == 200, answer.body
    assert [item["type"] for item in answer.json()["output"]] == ["compaction"]


def test_conversation_items_take_compactions_but_no_trigger(server):
    c = openai_sdk(server)
    item = post(server.port, "/v1/responses/compact", {"model": "scripted", "input": history()}).json()["output"][-1]
    conversation = c.conversations.create(items=[item])
    answer = c.responses.create(model="scripted", input="Go on.", conversation=conversation.id)
    assert answer.output_text == ANSWER
    prompt = rendered(server.port, {"input": "Again.", "conversation": conversation.id})["prompt"]
    assert SUMMARY in prompt and prompt.index(SUMMARY) < prompt.index("Go on.")
    with pytest.raises(openai.BadRequestError) as failed:
        c.conversations.items.create(conversation.id, items=[{"type": "compaction_trigger"}])
    assert failed.value.param == "items[0].type"


def test_a_background_compaction_trigger_is_stored_and_chained(server):
    c = openai_sdk(server)
    started = c.responses.create(model="scripted", input=trigger_input(), background=True)
    assert started.status in ("queued", "in_progress")
    done = wait_status(c, started.id, ("completed",))
    assert [item.type for item in done.output] == ["compaction"]
    follow = c.responses.create(model="scripted", input="Next.", previous_response_id=done.id)
    assert follow.output_text == ANSWER and follow.usage.input_tokens < 200


# ---- what the piece limit cannot hold is known before any summary (issue 44, item 8) ---------

@pytest.fixture(scope="module")
def small(models_dir, tmp_path_factory):
    """A 1024-token context: a summarisation job reads a few hundred tokens of conversation. A
    stream's keepalive comes at the first event of any job (`: compacting` during every piece)."""
    path = write_scripted_gguf(models_dir / "compaction-scripted-small.gguf", [[ANSWER]], summary=[SUMMARY])
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1", "--ctx-size", "1024",
                        "--prefill-keepalive", "0.001", "--data-dir", str(tmp_path_factory.mktemp("data")))
    yield srv
    srv.stop()


def short_messages(n: int) -> list[dict]:
    return [{"role": ("user", "assistant")[i % 2], "content": f"message number {i}"} for i in range(n)]


def test_a_conversation_the_piece_limit_cannot_hold_is_refused_before_any_summary(small):
    """2,000 short messages once ran 31 summaries (minutes on a real model) before the same 400."""
    before = compactions(small.port)
    answer = post(small.port, "/v1/responses/compact", {"model": "scripted", "input": short_messages(2000)})
    assert answer.status == 400, answer.body
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded" and "could not be compacted in 32 pieces" in error["message"]
    assert compactions(small.port) == before


def test_truncation_auto_drops_turns_at_once_where_compacting_cannot_help(small):
    before = compactions(small.port)
    answer = post(small.port, "/v1/responses", {"model": "scripted", "input": short_messages(1001),
                                                "truncation": "auto", "store": False})
    assert answer.status == 200, answer.body
    assert [item["type"] for item in answer.json()["output"]] == ["message"]
    assert compactions(small.port) == before


def test_a_conversation_a_few_pieces_can_hold_is_still_compacted(small):
    """The count before the first job refuses only what cannot be done: here several pieces run."""
    before = compactions(small.port)
    turns = [{"role": ("user", "assistant")[i % 2], "content": f"turn {i}: " + "tea leaves and water " * 5}
             for i in range(15)]
    answer = post(small.port, "/v1/responses/compact", {"model": "scripted", "input": turns})
    assert answer.status == 200, answer.body
    assert compactions(small.port) >= before + 3


def test_a_prompt_that_fails_after_the_compaction_opened_the_stream_ends_it_with_an_error_event(small):
    """Earlier turns summarised in pieces, each with `: compacting` on the stream (its head out),
    then this turn's own input, longer than the context, cannot be built even beside the
    summary: the stream ends with the Responses error event (the SDK's ResponseErrorEvent), and
    nothing of the response is stored (the conversation keeps its items, and goes on)."""
    c = openai_sdk(small)
    conversation = c.conversations.create()
    c.responses.create(model="scripted", input="Tell me about tea.", conversation=conversation.id)
    before = [item.id for item in c.conversations.items.list(conversation.id)]
    turns = [{"role": ("user", "assistant")[i % 2], "content": f"turn {i}: " + "tea leaves and water " * 12}
             for i in range(6)]
    events = list(c.responses.create(model="scripted", conversation=conversation.id, stream=True,
                                     input=[*turns, {"role": "user", "content": LONG}],
                                     extra_body={"context_management": [{"type": "compaction"}]}))
    assert [event.type for event in events] == ["error"], events
    assert events[0].code == "context_length_exceeded" and events[0].sequence_number == 0, events[0]
    assert [item.id for item in c.conversations.items.list(conversation.id)] == before
    assert c.responses.create(model="scripted", input="And now?", conversation=conversation.id).status == "completed"
    raw = post(small.port, "/v1/responses", {"model": "scripted", "stream": True, "store": False,
                                             "input": [*turns, {"role": "user", "content": LONG}],
                                             "context_management": [{"type": "compaction"}]})
    assert raw.status == 200 and raw.body.startswith(b": compacting\n\n"), raw.body[:200]
    assert [name for name, _ in parse_sse(raw.body)] == ["error"] and raw.body.endswith(b"\n\n"), raw.body[-300:]


def test_compact_max_tokens_bounds_the_summary(models_dir, tmp_path):
    path = write_scripted_gguf(models_dir / "compaction-long-summary.gguf", [[ANSWER]],
                               summary=["First part.", " Second part.", " Third part.", " Fourth part."])
    srv = ServerProcess(path, "--model-id", "scripted", "--compact-max-tokens", "2", "--no-store")
    try:
        c = openai_sdk(srv)
        cut = c.responses.create(model="scripted", input=trigger_input(), store=False)
        assert [item.type for item in cut.output] == ["compaction"] and cut.status == "completed"
        assert cut.usage.output_tokens == 2
        handed_back = [cut.output[0].model_dump(exclude_none=True), {"role": "user", "content": "Go on."}]
        prompt = rendered(srv.port, {"input": handed_back})["prompt"]
        assert "First part. Second part." in prompt and "Third" not in prompt
    finally:
        srv.stop()


def test_a_stream_hears_keepalives_while_its_input_is_compacted(models_dir):
    """The compaction before a streamed response's own job is waited for before the response
    exists: its head goes out with the first `: compacting` comment, one every --prefill-keepalive."""
    srv = ServerProcess(slow_model(models_dir), "--model-id", "slow", "--ctx-size", "8192", "--prefill-keepalive",
                        "0.2", "--slots", "1", "--no-store", "--compact-max-tokens", "4")
    try:
        body = {"model": "slow", "input": "hello world " * 1500, "stream": True, "store": False,
                "max_output_tokens": 2, **management(100)}
        answer = request(srv.port, post_json("/v1/responses", body), timeout=120)
    finally:
        srv.stop()
    assert answer.status == 200
    assert answer.body.index(b": compacting\n\n") < answer.body.index(b"event: response.created")
    events = parse_sse(answer.body)
    check_event_stream(events)
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == ["compaction", "message"]
