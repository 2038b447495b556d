"""OpenAI's `n` (issue 51): several choices of one request on the real engine, through the
official SDK and on the raw wire. Each choice equals a request of its own with seed + i; the
prompt is prefilled once and copied to the other choices (/metrics); streams carry each choice's
index; usage is summed with the prompt counted once; a client gone cancels every choice; bad
`n` is a 400 naming it, and the dialects without `n` refuse it as their APIs do; a choice that
fails fails the request in the shape the SDK reads."""

from __future__ import annotations

import json
import socket
import time
import uuid

import openai
import pytest

from clients import anthropic_sdk, openai_sdk
from conftest import ServerProcess
from localserve.engine.sequences import MIN_DATA_COPY_TOKENS
from localserve.runtime.placement import MIN_WAIT_TOKENS
from promtext import parse
from rawhttp import post_json, request
from responses_support import hermes_model
from sse import parse_sse
from tinymodel import NO_EOG, byte_token_id

SLOTS, MAX_QUEUE = 4, 3


@pytest.fixture(scope="module")
def srv(models_dir):
    """A tiny model in Hermes' style: its template renders tools, so choices can call them."""
    server = ServerProcess(hermes_model(models_dir), "--model-id", "tiny", "--slots", str(SLOTS),
                           "--max-queue", str(MAX_QUEUE), "--no-store")
    yield server
    server.stop()


@pytest.fixture(scope="module")
def client(srv):
    return openai_sdk(srv)


def question() -> list[dict]:
    """A prompt no earlier test left in a slot."""
    return [{"role": "user", "content": uuid.uuid4().hex[:8]}]


# sampled, so the choices differ
SAMPLED = {"temperature": 1.0, "top_p": 1.0, "extra_body": {"top_k": 0, "min_p": 0.0}}


def metrics(srv) -> object:
    return parse(request(srv.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").body.decode())


def prefilled(scrape) -> float:
    return scrape.value("localserve_prefilled_tokens_total")


def copied(scrape) -> float:
    return scrape.value("localserve_prompt_tokens_reused_total", source="slot")


# ---- the choices equal separate requests ----------------------------------------------------

def test_whole_choices_equal_separate_requests_with_seed_plus_i(srv, client):
    messages = question()
    reply = client.chat.completions.create(model="tiny", messages=messages, n=3, seed=41, max_tokens=12,
                                           logit_bias=NO_EOG, **SAMPLED)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    texts = [c.message.content for c in reply.choices]
    assert len(set(texts)) > 1, texts           # sampled: the seeds differ, so do the choices
    prompt = reply.usage.prompt_tokens
    singles = [client.chat.completions.create(model="tiny", messages=messages, seed=41 + i, max_tokens=12,
                                              logit_bias=NO_EOG, **SAMPLED) for i in range(3)]
    assert texts == [s.choices[0].message.content for s in singles]
    assert reply.usage.prompt_tokens == singles[0].usage.prompt_tokens       # counted once
    assert reply.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles) == 36
    assert reply.usage.total_tokens == prompt + 36
    assert all(c.finish_reason == "length" for c in reply.choices)


def test_the_prompt_is_prefilled_once(srv, client):
    """A prompt shorter than the head another request would wait for (placement.MIN_WAIT_TOKENS),
    long enough to be worth a copy as data (engine/sequences.MIN_DATA_COPY_TOKENS): the choices'
    own rule alone makes them wait for the first one's and copy it."""
    before = metrics(srv)
    reply = client.completions.create(model="tiny", prompt=uuid.uuid4().hex, n=3, max_tokens=2, **SAMPLED)
    after = metrics(srv)
    prompt, cached = reply.usage.prompt_tokens, reply.usage.prompt_tokens_details.cached_tokens
    assert MIN_DATA_COPY_TOKENS < prompt < MIN_WAIT_TOKENS
    # the first choice computes what no slot held, each other one token (its last: its logits are
    # its own to sample), the rest copied
    assert prefilled(after) - prefilled(before) == prompt - cached + 2
    assert copied(after) - copied(before) == 2 * (prompt - 1)


def test_streamed_choices_equal_separate_requests(srv, client):
    messages = question()
    stream = client.chat.completions.create(model="tiny", messages=messages, n=3, seed=7, max_tokens=10,
                                            logit_bias=NO_EOG, stream=True, stream_options={"include_usage": True},
                                            **SAMPLED)
    texts, finishes, usages = ["", "", ""], [None, None, None], []
    for chunk in stream:
        if chunk.usage is not None:
            assert chunk.choices == []
            usages.append(chunk.usage)
            continue
        choice, = chunk.choices             # every chunk one choice
        texts[choice.index] += choice.delta.content or ""
        if choice.finish_reason is not None:
            assert finishes[choice.index] is None
            finishes[choice.index] = choice.finish_reason
    singles = [client.chat.completions.create(model="tiny", messages=messages, seed=7 + i, max_tokens=10,
                                              logit_bias=NO_EOG, **SAMPLED) for i in range(3)]
    assert texts == [s.choices[0].message.content for s in singles]
    assert finishes == ["length"] * 3
    usage, = usages
    assert usage.prompt_tokens == singles[0].usage.prompt_tokens and usage.completion_tokens == 30


def test_completions_choices_with_echo_logprobs_and_stop(srv, client):
    prompt = f"Once {uuid.uuid4().hex[:6]} upon a time"
    fields = dict(model="tiny", prompt=prompt, seed=3, max_tokens=8, logprobs=2, echo=False, stop=["e"],
                  logit_bias=NO_EOG, **SAMPLED)
    reply = client.completions.create(n=4, **fields)
    singles = [client.completions.create(**{**fields, "seed": 3 + i}) for i in range(4)]
    assert [c.index for c in reply.choices] == [0, 1, 2, 3]
    assert [c.text for c in reply.choices] == [s.choices[0].text for s in singles]
    assert [c.finish_reason for c in reply.choices] == [s.choices[0].finish_reason for s in singles]
    assert [c.logprobs.tokens for c in reply.choices] == [s.choices[0].logprobs.tokens for s in singles]
    assert reply.usage.completion_tokens == sum(s.usage.completion_tokens for s in singles)
    streamed = ["", "", "", ""]
    # not strict: the SDK's Completion type forbids the null finish_reason that the API itself
    # sends on all but a choice's last streamed chunk
    loose = openai_sdk(srv, strict=False)
    for chunk in loose.completions.create(n=4, stream=True, **{**fields, "echo": True, "logprobs": None}):
        for choice in chunk.choices:
            streamed[choice.index] += choice.text
    assert streamed == [prompt + s.choices[0].text for s in singles]     # each choice echoes the prompt


def test_tool_calls_per_choice(srv, client):
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}]
    reply = client.chat.completions.create(model="tiny", messages=question(), n=2, seed=5, max_tokens=200,
                                           tools=tools, tool_choice="required", **SAMPLED)
    assert [c.finish_reason for c in reply.choices] == ["tool_calls", "tool_calls"]
    assert all(c.message.tool_calls[0].function.name == "get_time" for c in reply.choices)
    seen = {0: [], 1: []}
    for chunk in client.chat.completions.create(model="tiny", messages=question(), n=2, seed=5, max_tokens=200,
                                                tools=tools, tool_choice="required", stream=True, **SAMPLED):
        choice, = chunk.choices
        for call in choice.delta.tool_calls or []:
            seen[choice.index].append(call)
    for calls in seen.values():
        assert calls[0].function.name == "get_time" and calls[0].index == 0
        json.loads("".join(c.function.arguments or "" for c in calls))


def test_llama_servers_n_cmpl(srv):
    """/completion's n_cmpl (and `n`, its alias there): an array of completion objects, a prompt's
    choices numbered after it, each with seed + i; a stream's lines carry their index."""
    body = {"prompt": uuid.uuid4().hex, "n_predict": 6, "seed": 9, "temperature": 1.0, "top_k": 0, "min_p": 0,
            "top_p": 1.0, "ignore_eos": True}
    answers = request(srv.port, post_json("/completion", {**body, "n_cmpl": 3})).json()
    alone = [request(srv.port, post_json("/completion", {**body, "seed": 9 + i})).json() for i in range(3)]
    assert [a["index"] for a in answers] == [0, 1, 2]
    assert [a["content"] for a in answers] == [a["content"] for a in alone]
    two = request(srv.port, post_json("/completion", {**body, "prompt": [body["prompt"], "other"], "n": 2})).json()
    assert [a["index"] for a in two] == [0, 1, 2, 3]
    assert [a["content"] for a in two[:2]] == [a["content"] for a in alone[:2]]
    resp = request(srv.port, post_json("/completion", {**body, "n_cmpl": 2, "stream": True}))
    events = [data for _, data in parse_sse(resp.body)]
    for index in (0, 1):
        assert "".join(e["content"] for e in events if e["index"] == index and not e["stop"]) == alone[index]["content"]
    refused = request(srv.port, post_json("/completion", {**body, "n_cmpl": 0}))
    assert refused.status == 400 and "n_cmpl" in refused.body.decode()


# ---- the raw wire ---------------------------------------------------------------------------

def test_raw_stream_shape(srv):
    body = {"model": "tiny", "messages": question(), "n": 2, "max_tokens": 3, "logit_bias": NO_EOG,
            "stream": True, "stream_options": {"include_usage": True}}
    resp = request(srv.port, post_json("/v1/chat/completions", body), timeout=60)
    assert resp.status == 200
    assert resp.body.rstrip().endswith(b"data: [DONE]")
    chunks = [data for _, data in parse_sse(resp.body)]
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    *choice_chunks, usage = chunks
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 6
    for index in (0, 1):
        own = [c["choices"][0] for c in choice_chunks if c["choices"][0]["index"] == index]
        assert own[0]["delta"] == {"role": "assistant", "content": ""}
        assert [c["finish_reason"] for c in own[:-1]] == [None] * (len(own) - 1)
        assert own[-1]["delta"] == {} and own[-1]["finish_reason"] == "length"
    assert all(len(c["choices"]) == 1 for c in choice_chunks)


DEAD_END = 'root ::= "x" "y" | "z"'     # y banned (its piece and its byte token): a choice that draws x fails
DEAD_END_SEED = 110                     # seeds 110..113 alone: x, z, x, z


def test_a_choice_that_fails_fails_the_request_as_the_sdk_reads_it(srv, client):
    """OpenAI's choices have no error of their own: a choice ended with finish_reason "error"
    was refused by the SDK's types, so the choices that went well were lost anyway. The request
    fails with the failed choice's error: a 400 whole, the error event once streaming (nothing
    of the failed choice before it), on Chat Completions and Completions."""
    y = request(srv.port, post_json("/tokenize", {"content": "y"})).json()["tokens"]
    assert request(srv.port, post_json("/detokenize", {"tokens": [byte_token_id(ord("y"))]})).json()["content"] == "y"
    banned = {str(token): -100 for token in (*y, byte_token_id(ord("y")))}
    fields = {"model": "tiny", "max_tokens": 4, "temperature": 1.0, "top_p": 1.0, "logit_bias": banned,
              "extra_body": {"top_k": 0, "min_p": 0.0, "grammar": DEAD_END}}
    messages = [{"role": "user", "content": "Pick one."}]
    alone = []
    for i in range(4):          # each choice as a request of its own: some end ("z"), some fail
        try:
            alone.append(client.chat.completions.create(messages=messages, seed=DEAD_END_SEED + i, **fields)
                         .choices[0].message.content)
        except openai.BadRequestError as error:
            assert "no token is allowed" in error.message
            alone.append(None)
    assert "z" in alone and None in alone, alone
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(messages=messages, seed=DEAD_END_SEED, n=4, **fields)
    assert "no token is allowed" in refused.value.message
    loose = openai_sdk(srv, strict=False)   # Completion's type forbids a streamed chunk's null finish_reason
    for create, body in ((client.chat.completions.create, {"messages": messages}),
                         (loose.completions.create, {"prompt": "Pick one."})):
        seen = []
        with pytest.raises(openai.APIError) as failed:
            for chunk in create(**body, seed=DEAD_END_SEED, n=4, stream=True, **fields):
                seen.append(chunk)
        assert "no token is allowed" in failed.value.message
        assert all(c.choices[0].finish_reason in (None, "stop") for c in seen if c.choices)
    assert client.chat.completions.create(model="tiny", messages=messages, n=2, max_tokens=2).choices[1].index == 1


@pytest.mark.parametrize("value", [0, -1, 17, 1.5, "2", True, None])
def test_bad_n_is_a_400_naming_n(srv, value):
    for path, field in (("/v1/chat/completions", {"messages": question()}), ("/v1/completions", {"prompt": "hi"})):
        resp = request(srv.port, post_json(path, {"model": "tiny", "n": value, "max_tokens": 2, **field}))
        if value is None:           # null is the default, as OpenAI takes it
            assert resp.status == 200, resp.body
            continue
        assert resp.status == 400, resp.body
        error = resp.json()["error"]
        assert error["param"] == "n" and error["type"] == "invalid_request_error"


def test_more_choices_than_slots_queue_and_more_than_fit_are_a_400(srv, client):
    reply = client.chat.completions.create(model="tiny", messages=question(), n=SLOTS + MAX_QUEUE, seed=1,
                                           max_tokens=2, **SAMPLED)
    assert len(reply.choices) == SLOTS + MAX_QUEUE
    resp = request(srv.port, post_json("/v1/chat/completions", {"model": "tiny", "messages": question(),
                                                                 "n": SLOTS + MAX_QUEUE + 1}))
    assert resp.status == 400
    error = resp.json()["error"]
    assert error["param"] == "n" and "--slots" in error["message"] and "--max-queue" in error["message"]


def test_dialects_without_n_refuse_it(srv):
    anthropic = anthropic_sdk(srv)
    import anthropic as sdk
    with pytest.raises(sdk.BadRequestError) as refused:
        anthropic.messages.create(model="tiny", max_tokens=4, messages=[{"role": "user", "content": "hi"}],
                                  extra_body={"n": 2})
    assert "n" in refused.value.message
    resp = request(srv.port, post_json("/v1/responses", {"model": "tiny", "input": "hi", "n": 2}))
    assert resp.status == 400 and resp.json()["error"]["param"] == "n"
    resp = request(srv.port, post_json("/api/generate", {"model": "tiny", "prompt": "hi", "n": 2, "stream": False,
                                                         "options": {"num_predict": 2}}))
    assert resp.status == 200 and "response" in resp.json()      # Ollama ignores fields it has not


def test_client_gone_cancels_every_choice(srv):
    before = metrics(srv)
    body = {"model": "tiny", "messages": question(), "n": 3, "max_tokens": 4000, "logit_bias": NO_EOG, "stream": True}
    with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as sock:
        sock.sendall(post_json("/v1/chat/completions", body))
        received = b""
        while received.count(b'"content":"') < 6:        # every choice under way
            data = sock.recv(65536)
            assert data, received
            received += data
    deadline = time.monotonic() + 30
    while True:
        after = metrics(srv)
        if ended(after, "cancelled") - ended(before, "cancelled") >= 3 and not after.value("localserve_slots_busy"):
            break
        assert time.monotonic() < deadline, "the choices were not all cancelled"
        time.sleep(0.05)
    assert ended(after, "cancelled") - ended(before, "cancelled") == 3
    assert ended(after, "length") == ended(before, "length")        # none ran on to its end


def ended(scrape, reason: str) -> float:
    return scrape.value("localserve_generations_total", finish_reason=reason)
