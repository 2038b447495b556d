"""Responses API stored state: background runs, polling, cancel, live follow, conversations,
restarts and kill -9, and a server with storage off.

Background and cancel tests use a slower random model (a few MB) with every end-of-generation
token banned, so a response runs for seconds: long enough to poll, follow and cancel.
"""

from __future__ import annotations

import re
import time

import openai
import pytest

from rawhttp import RawConnection, post_json, request, request_id_of
from responses_support import (NO_EOG, check_event_stream, client, forced, get_json, hermes_model, slow_model,
                               start, wait_status)
from sse import parse_sse

LONG = {"max_output_tokens": 4000, "extra_body": {"logit_bias": NO_EOG}}


@pytest.fixture(scope="module")
def slow(models_dir, tmp_path_factory):
    srv = start(slow_model(models_dir), tmp_path_factory.mktemp("slow-data"), "--ctx-size", "8192",
                "--slots", "1")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def hermes(models_dir, tmp_path_factory):
    srv = start(hermes_model(models_dir), tmp_path_factory.mktemp("state-data"))
    yield srv
    srv.stop()


def background(c, **kwargs):
    kwargs.setdefault("model", "x")
    kwargs.setdefault("input", "hi")
    return c.responses.create(background=True, **kwargs)


def assert_slot_free_and_serving(port: int, timeout: float = 30.0) -> None:
    """The single slot is free again (state read from /slots, no stopwatch) and a chat is answered."""
    deadline = time.monotonic() + timeout
    while request(port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()["slots"][0]["busy"]:
        assert time.monotonic() < deadline, "the slot stayed busy"
        time.sleep(0.05)
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    assert request(port, post_json("/v1/chat/completions", body), timeout=60).status == 200


# ---- background, poll, cancel -----------------------------------------------------------------

def test_background_is_queued_at_once_and_polls_to_its_end(slow):
    c = client(slow)
    b = background(c, max_output_tokens=40, extra_body={"logit_bias": NO_EOG})
    assert b.status == "queued" and b.background is True and b.output == [] and b.usage is None
    seen = [b.status]
    deadline = time.monotonic() + 60            # a stuck response fails here instead of hanging CI
    while seen[-1] in ("queued", "in_progress") and time.monotonic() < deadline:
        status = c.responses.retrieve(b.id).status
        if status != seen[-1]:
            seen.append(status)
        time.sleep(0.01)
    assert seen[-1] == "incomplete", seen and set(seen) <= {"queued", "in_progress", "incomplete"}
    final = c.responses.retrieve(b.id)
    assert final.usage.output_tokens == 40 and final.output_text
    events = parse_sse(get_json(slow.port, f"/v1/responses/{b.id}?stream=true").body)
    check_event_stream(events)
    assert [d["type"] for _, d in events][:3] == ["response.created", "response.queued", "response.in_progress"]
    assert events[0][1]["response"]["status"] == "queued"


def test_queued_then_in_progress_then_completed_and_cancel_of_a_running_one(slow):
    c = client(slow)
    running = background(c, **LONG)
    wait_status(c, running.id, ("in_progress",))
    waiting = background(c, input="after", extra_body=forced("done"))   # the one slot is busy
    time.sleep(0.3)
    assert c.responses.retrieve(waiting.id).status == "queued"

    cancelled = c.responses.cancel(running.id)
    assert cancelled.status == "cancelled" and cancelled.id == running.id
    assert slow.wait_log(f"cancelled through POST /v1/responses/{running.id}/cancel")
    done = wait_status(c, waiting.id, ("completed",))
    assert done.output_text == "done"
    stored = c.responses.retrieve(running.id)
    assert stored.status == "cancelled"
    assert stored.output and stored.output[0].status == "incomplete"       # partial output kept
    assert c.responses.cancel(running.id).status == "cancelled"            # cancelling again is fine
    events = [d["type"] for _, d in parse_sse(get_json(slow.port, f"/v1/responses/{running.id}?stream=true").body)]
    assert not {"response.completed", "response.incomplete", "response.failed"} & set(events)
    with pytest.raises(openai.BadRequestError) as info:
        c.responses.cancel(waiting.id)
    assert info.value.body["code"] == "response_already_completed"
    with pytest.raises(openai.NotFoundError):
        c.responses.cancel("resp_unknown")


def test_cancel_stops_the_runtime_job_at_once(slow):
    c = client(slow)
    b = background(c, **LONG)
    wait_status(c, b.id, ("in_progress",))
    c.responses.cancel(b.id)
    assert slow.wait_log(f"cancelled through POST /v1/responses/{b.id}/cancel")
    assert_slot_free_and_serving(slow.port)
    line = next(l for l in slow.lines if f"/v1/responses/{b.id}/cancel" in l and "cancelled job" in l)
    assert int(re.search(r"after (\d+) tokens", line).group(1)) < 4000


def test_cancel_of_a_queued_response(slow):
    c = client(slow)
    running = background(c, **LONG)
    wait_status(c, running.id, ("in_progress",))
    queued = background(c, **LONG)
    resp = request(slow.port, post_json("/v1/responses", {"input": "x", "previous_response_id": queued.id}))
    assert resp.status == 400 and resp.json()["error"]["code"] == "previous_response_not_finished"
    assert c.responses.cancel(queued.id).status == "cancelled"
    c.responses.cancel(running.id)
    assert slow.wait_log(f"cancelled through POST /v1/responses/{running.id}/cancel")   # its runtime job
    assert_slot_free_and_serving(slow.port)
    assert c.responses.retrieve(queued.id).status == "cancelled"


def test_following_a_running_background_response_live(slow):
    c = client(slow)
    b = background(c, max_output_tokens=60, extra_body={"logit_bias": NO_EOG})
    events = [e for e in c.responses.retrieve(b.id, stream=True)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.incomplete" and events[-1].response.usage.output_tokens == 60

    b = background(c, max_output_tokens=60, extra_body={"logit_bias": NO_EOG})
    later = parse_sse(get_json(slow.port, f"/v1/responses/{b.id}?stream=true&starting_after=1").body)
    check_event_stream(later, first=2)


def test_stream_client_that_leaves_cancels_and_the_response_is_stored_cancelled(slow):
    conn = RawConnection(slow.port, timeout=30)
    conn.send(post_json("/v1/responses", {"input": "hi", "stream": True, "max_output_tokens": 4000,
                                          "logit_bias": NO_EOG}))
    received = b""
    while received.count(b"response.output_text.delta") < 3:
        received += conn.sock.recv(65536)
    response_id = parse_sse(received.split(b"\r\n\r\n", 1)[1].split(b"\r\n", 1)[1])[0][1]["response"]["id"]
    conn.close()
    assert slow.wait_cancelled(request_id_of(received), "client went away during the stream")
    assert wait_status(client(slow), response_id, ("cancelled",), timeout=10).status == "cancelled"
    assert_slot_free_and_serving(slow.port)


# ---- what a chain gives the model ---------------------------------------------------------------

def rendered(port: int, body: dict) -> dict:
    resp = request(port, post_json("/apply-template", body))
    assert resp.status == 200, resp.body
    return resp.json()


def as_the_model_gets_it(port: int, messages: list[dict]) -> str:
    """Chat messages rendered, tokenized as a prompt is (BOS and all), and read back."""
    text = rendered(port, {"messages": messages})["prompt"]
    tokens = request(port, post_json("/tokenize", {"content": text, "add_special": True})).json()["tokens"]
    return request(port, post_json("/detokenize", {"tokens": tokens})).json()["content"]


def test_a_previous_response_chain_gives_the_model_its_history_in_order(hermes):
    """/apply-template with a Responses body renders what /v1/responses would give the model: the
    chain's turns, each once, oldest first, as the chat template renders the same conversation."""
    c = client(hermes)
    first = c.responses.create(model="x", instructions="Be brief.", input="Remember the number seven.",
                               extra_body=forced("Noted."))
    second = c.responses.create(model="x", input="Which number?", previous_response_id=first.id,
                                extra_body=forced("Seven."))
    third = {"model": "x", "input": "Sure?", "previous_response_id": second.id}
    given = rendered(hermes.port, third)
    turns = [("user", "Remember the number seven."), ("assistant", "Noted."), ("user", "Which number?"),
             ("assistant", "Seven."), ("user", "Sure?")]
    messages = [{"role": role, "content": text} for role, text in turns]
    # instructions are not carried over a chain (the API's rule): only this request's own count
    assert given["prompt"] == as_the_model_gets_it(hermes.port, messages)
    assert given["prompt"] != as_the_model_gets_it(hermes.port, [{"role": "system", "content": "Be brief."}, *messages])
    positions = [given["prompt"].index(text) for _, text in turns]
    assert positions == sorted(positions) and all(given["prompt"].count(t) == 1 for _, t in turns)
    answered = c.responses.create(model="x", **{k: v for k, v in third.items() if k != "model"},
                                  extra_body=forced("Yes."))
    assert answered.usage.input_tokens == given["prompt_tokens"]      # what was rendered is what ran
    with_own = rendered(hermes.port, {**third, "instructions": "Answer in French."})["prompt"]
    assert with_own == as_the_model_gets_it(hermes.port, [{"role": "system", "content": "Answer in French."}, *messages])


# ---- conversations ------------------------------------------------------------------------------

def test_conversations_end_to_end(hermes):
    c = client(hermes)
    conv = c.conversations.create(items=[{"type": "message", "role": "user", "content": "My name is Ada."}],
                                  metadata={"topic": "names"})
    assert conv.id.startswith("conv_") and conv.metadata == {"topic": "names"}
    assert c.conversations.retrieve(conv.id).model_dump() == conv.model_dump()
    assert c.conversations.update(conv.id, metadata={"topic": "greetings"}).metadata == {"topic": "greetings"}

    added = c.conversations.items.create(conv.id, items=[
        {"type": "message", "role": "assistant", "content": "Hello Ada."},
        {"type": "message", "role": "user", "content": "Remember it."}])
    assert len(added.data) == 2 and added.first_id == added.data[0].id and added.has_more is False

    first = c.responses.create(model="x", input="What is my name?", conversation=conv.id,
                               extra_body=forced("Ada."))
    assert first.conversation.id == conv.id and first.output_text == "Ada."
    texts = [(i.role, i.content[0].text) for i in c.conversations.items.list(conv.id, order="asc")]
    assert texts == [("user", "My name is Ada."), ("assistant", "Hello Ada."), ("user", "Remember it."),
                     ("user", "What is my name?"), ("assistant", "Ada.")]
    second = c.responses.create(model="x", input="Again?", conversation={"id": conv.id},
                                extra_body=forced("Ada!"))
    assert second.usage.input_tokens > first.usage.input_tokens
    assert second.usage.input_tokens_details.cached_tokens > 0

    everything = list(c.conversations.items.list(conv.id, limit=2, order="asc"))   # pages of two
    assert len(everything) == 7
    page = get_json(hermes.port, f"/v1/conversations/{conv.id}/items?limit=3").json()
    assert page["has_more"] is True and page["data"][0]["content"][0]["text"] == "Ada!"   # newest first

    item = c.conversations.items.retrieve(everything[0].id, conversation_id=conv.id)
    assert item.content[0].text == "My name is Ada."
    assert c.conversations.items.delete(everything[0].id, conversation_id=conv.id).id == conv.id
    with pytest.raises(openai.NotFoundError):
        c.conversations.items.retrieve(everything[0].id, conversation_id=conv.id)

    assert c.conversations.delete(conv.id).deleted is True
    for call in (lambda: c.conversations.retrieve(conv.id), lambda: c.conversations.items.list(conv.id),
                 lambda: c.responses.create(model="x", input="hi", conversation=conv.id)):
        with pytest.raises(openai.NotFoundError):
            call()


def test_conversation_validation(hermes):
    c = client(hermes)
    assert c.conversations.create().metadata == {}
    with pytest.raises(openai.BadRequestError):
        c.conversations.create(items=[{"type": "message", "role": "user", "content": "x"}] * 21)
    with pytest.raises(openai.BadRequestError):
        c.conversations.create(metadata={"k": 1})
    conv = c.conversations.create()
    with pytest.raises(openai.BadRequestError):
        c.conversations.items.create(conv.id, items=[])
    with pytest.raises(openai.NotFoundError):
        c.conversations.items.create("conv_nope", items=[{"role": "user", "content": "x"}])
    resp = get_json(hermes.port, f"/v1/conversations/{conv.id}/items?order=sideways")
    assert resp.status == 400 and resp.json()["error"]["param"] == "order"


# ---- restarts ----------------------------------------------------------------------------------

def test_responses_and_conversations_survive_a_restart(models_dir, tmp_path):
    model = hermes_model(models_dir)
    srv = start(model, tmp_path)
    try:
        c = client(srv)
        r = c.responses.create(model="x", input="Keep this.", extra_body=forced("Kept."))
        conv = c.conversations.create(items=[{"role": "user", "content": "stored item"}], metadata={"a": "1"})
        events = parse_sse(get_json(srv.port, f"/v1/responses/{r.id}?stream=true").body)
    finally:
        assert srv.stop() == 0
    srv = start(model, tmp_path)
    try:
        c = client(srv)
        assert c.responses.retrieve(r.id).model_dump() == r.model_dump()
        assert [i.content[0].text for i in c.responses.input_items.list(r.id)] == ["Keep this."]
        assert parse_sse(get_json(srv.port, f"/v1/responses/{r.id}?stream=true").body) == events
        assert c.conversations.retrieve(conv.id).metadata == {"a": "1"}
        assert [i.content[0].text for i in c.conversations.items.list(conv.id)] == ["stored item"]
        follow = c.responses.create(model="x", input="And now?", previous_response_id=r.id,
                                    extra_body=forced("Still here."))
        assert follow.status == "completed"
    finally:
        srv.stop()


def test_kill_9_leaves_a_running_background_response_failed(models_dir, tmp_path):
    model = slow_model(models_dir)
    srv = start(model, tmp_path, "--ctx-size", "8192")
    try:
        c = client(srv)
        done = c.responses.create(model="x", input="finished before", extra_body=forced("ok"))
        b = background(c, **LONG)
        wait_status(c, b.id, ("in_progress",))
    finally:
        srv.proc.kill()                     # SIGKILL: no chance to clean up
        srv.stop()
    srv = start(model, tmp_path, "--ctx-size", "8192")
    try:
        assert srv.wait_log("marked 1 response(s) failed")
        c = client(srv)
        failed = c.responses.retrieve(b.id)
        assert failed.status == "failed" and failed.error.code == "server_error"
        assert c.responses.retrieve(done.id).status == "completed"
        events = parse_sse(get_json(srv.port, f"/v1/responses/{b.id}?stream=true").body)
        check_event_stream(events)
        assert events[-1][1]["type"] == "response.failed"
        with pytest.raises(openai.BadRequestError) as info:
            c.responses.cancel(b.id)
        assert info.value.body["code"] == "response_already_failed"
    finally:
        srv.stop()


def test_sigterm_lets_a_running_background_response_finish(models_dir, tmp_path):
    import signal
    model = slow_model(models_dir)
    srv = start(model, tmp_path, "--ctx-size", "8192", "--drain-timeout", "60")
    try:
        c = client(srv)
        b = background(c, max_output_tokens=600, extra_body={"logit_bias": NO_EOG})
        wait_status(c, b.id, ("in_progress",))
        srv.proc.send_signal(signal.SIGTERM)
        assert srv.proc.wait(60) == 0
    finally:
        srv.stop()
    srv = start(model, tmp_path, "--ctx-size", "8192")
    try:
        finished = client(srv).responses.retrieve(b.id)
        assert finished.status == "incomplete"          # it ran to max_output_tokens, not cut off as failed
        assert finished.usage.output_tokens == 600
    finally:
        srv.stop()


# ---- storage off ---------------------------------------------------------------------------------

def test_no_store_serves_responses_without_state(models_dir):
    srv = start(hermes_model(models_dir), None, "--no-store")
    try:
        c = client(srv)
        r = c.responses.create(model="x", input="hi", max_output_tokens=2)
        assert r.store is False and r.status == "incomplete"
        with pytest.raises(openai.NotFoundError) as info:
            c.responses.retrieve(r.id)
        assert "--no-store" in info.value.body["message"]
        for body in ({"previous_response_id": r.id}, {"conversation": "conv_x"}, {"background": True}):
            resp = request(srv.port, post_json("/v1/responses", {"input": "hi", **body}))
            assert resp.status == 400 and resp.json()["error"]["code"] == "storage_disabled"
        with pytest.raises(openai.BadRequestError) as info:
            c.conversations.create()
        assert info.value.body["code"] == "storage_disabled"
    finally:
        srv.stop()
