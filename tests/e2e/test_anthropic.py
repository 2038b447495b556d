"""Anthropic Messages (/v1/messages, /v1/messages/count_tokens) through the official SDK.

The in-process tests (no server) are in tests/unit/dialects/test_anthropic_messages.py.
Three tiny models: the ChatML one from conftest for plain text, a Hermes-template one
for tool use, a Qwen3-template one (it opens <think> itself) for thinking blocks; and the
slow model of test_cancel.py for keepalive pings, a full queue and disconnects. Exact
output is forced through the real sampler with a GBNF grammar or a logit bias.
"""

from __future__ import annotations

import json
import time

import anthropic
import pytest

from clients import anthropic_sdk
from conftest import ServerProcess, slow_model
from family_templates import FAMILY_SPECIAL_TOKENS, write_family_gguf
from promtext import parse
from rawhttp import RawConnection, post_json, request, request_id_of
from sse import parse_sse
from tinymodel import NO_EOG, token_ids

GET_METRICS = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"

USER = [{"role": "user", "content": "Say hello"}]
HELLO = 'root ::= "Hello, world!"'
TIME = {"name": "get_time", "description": "The time in a zone", "input_schema": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 8}}, "required": ["zone"]}}
WEATHER = {"name": "get_weather", "description": "Weather for a city", "input_schema": {
    "type": "object", "required": ["city", "days"], "properties": {
        "city": {"type": "string", "maxLength": 10}, "days": {"type": "integer", "minimum": 1, "maximum": 7}}}}
TOOLS = [WEATHER, TIME]
TIME_CALL = '<tool_call>\\n{\\"name\\": \\"get_time\\", \\"arguments\\": {\\"zone\\": \\"UTC\\"}}\\n</tool_call>'
LONG_PROMPT = "hello world " * 1500          # seconds of prefill on the slow model


@pytest.fixture
def client(server):
    return anthropic_sdk(server)


@pytest.fixture(scope="module")
def hermes(models_dir):
    path = write_family_gguf(models_dir / "tiny-anthropic-hermes.gguf", "hermes")
    srv = ServerProcess(path, "--model-id", "hermes", "--no-store")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def qwen3(models_dir, tmp_path_factory):
    path = write_family_gguf(models_dir / "tiny-anthropic-qwen3.gguf", "qwen3")
    srv = ServerProcess(path, "--model-id", "qwen3", "--data-dir", str(tmp_path_factory.mktemp("qwen3-data")))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def slow_server(models_dir):
    srv = ServerProcess(slow_model(models_dir), "--model-id", "slow", "--ctx-size", "8192", "--prefill-keepalive", "0.2",
                        "--slots", "1", "--max-queue", "1", "--max-body-bytes", "100000", "--no-store")
    yield srv
    srv.stop()


def comparable(message) -> dict:
    """A message as a dict without what differs between two runs of the same output:
    the ids, and how the prompt splits between processed and cached tokens."""
    value = message.model_dump(exclude_none=True)
    assert value.pop("id").startswith("msg_")
    for block in value["content"]:
        if block["type"] == "tool_use":
            assert block.pop("id").startswith("toolu_")
    usage = value.pop("usage")
    value["prompt_tokens"] = (usage["input_tokens"] + usage["cache_read_input_tokens"]
                              + usage["cache_creation_input_tokens"])
    value["output_tokens"] = usage["output_tokens"]
    return value


def prompt_tokens(message) -> int:
    u = message.usage
    return u.input_tokens + u.cache_read_input_tokens + u.cache_creation_input_tokens


def check_wire(events: list[tuple[str | None, dict | None]]) -> list[dict]:
    """The DESIGN.md checklist on raw events; returns the content blocks as streamed."""
    events = [(n, d) for n, d in events if n != ":"]
    for name, data in events:
        assert name is not None and data is not None and data["type"] == name, (name, data)
    names = [n for n, _ in events if n != "ping"]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert events[1][0] == "ping"                      # as Anthropic does, right after message_start
    blocks: list[dict] = []
    open_index = None
    for name, data in events:
        if name == "content_block_start":
            assert open_index is None and data["index"] == len(blocks)
            open_index = data["index"]
            blocks.append({**data["content_block"], "deltas": []})
        elif name == "content_block_delta":
            assert data["index"] == open_index
            blocks[open_index]["deltas"].append(data["delta"])
        elif name == "content_block_stop":
            assert data["index"] == open_index
            open_index = None
        elif name in ("message_delta", "message_stop"):
            assert open_index is None
    for block in blocks:
        kinds = [d["type"] for d in block["deltas"]]
        if block["type"] == "thinking":
            assert kinds.count("signature_delta") == 1 and kinds[-1] == "signature_delta"
            assert set(kinds[:-1]) <= {"thinking_delta"}
        elif block["type"] == "text":
            assert set(kinds) <= {"text_delta"}
        elif block["type"] == "compaction":              # the whole summary in one delta
            assert kinds == ["compaction_delta"]
        else:
            assert block["type"] == "tool_use" and set(kinds) <= {"input_json_delta"}
    return blocks


def raw_stream(port: int, body: dict) -> tuple[int, list]:
    resp = request(port, post_json("/v1/messages", {**body, "stream": True}), timeout=60)
    return resp.status, parse_sse(resp.body, comments=True)


# ---- plain text -----------------------------------------------------------------------

def test_create_shape_and_echoed_model(client):
    raw = client.messages.with_raw_response.create(model="claude-opus-4-7", max_tokens=50, messages=USER,
                                                   extra_body={"grammar": HELLO, "temperature": 0})
    assert raw.headers.get("request-id", "").startswith("req_")
    message = raw.parse()
    assert message.id.startswith("msg_") and message.type == "message" and message.role == "assistant"
    assert message.model == "claude-opus-4-7"           # whatever was asked, echoed
    assert [b.type for b in message.content] == ["text"] and message.content[0].text == "Hello, world!"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.output_tokens > 0 and prompt_tokens(message) > 0


def test_max_tokens_is_the_stop_reason_when_reached(client):
    message = client.messages.create(model="m", max_tokens=3, messages=USER, extra_body={"logit_bias": NO_EOG})
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 3


@pytest.mark.parametrize("stream", [False, True])
def test_stop_sequence(client, stream):
    kwargs = dict(model="m", max_tokens=50, messages=USER, stop_sequences=["zzz", "lo, wor"],
                  extra_body={"grammar": 'root ::= "Hello, world! Goodbye"', "temperature": 0})
    if stream:
        with client.messages.stream(**kwargs) as s:
            message = s.get_final_message()
    else:
        message = client.messages.create(**kwargs)
    assert message.content[0].text == "Hel"
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "lo, wor"


def test_stream_final_message_equals_create(client):
    kwargs = dict(model="claude-x", max_tokens=50, messages=USER, system="You are terse.",
                  metadata={"user_id": "u-1"},
                  extra_body={"grammar": HELLO, "temperature": 0, "top_p": 0.9, "top_k": 10})
    whole = client.messages.create(**kwargs)
    with client.messages.stream(**kwargs) as s:
        text = "".join(s.text_stream)
        streamed = s.get_final_message()
    assert text == "Hello, world!"
    assert comparable(streamed) == comparable(whole)


def test_raw_stream_follows_the_checklist(server):
    status, events = raw_stream(server.port, {"model": "m", "max_tokens": 50, "messages": USER, "grammar": HELLO})
    assert status == 200
    blocks = check_wire(events)
    assert [b["type"] for b in blocks] == ["text"]
    assert "".join(d["text"] for d in blocks[0]["deltas"]) == "Hello, world!"
    start = events[0][1]["message"]
    assert start["usage"]["output_tokens"] == 0 and start["content"] == [] and start["stop_reason"] is None
    delta = [d for n, d in events if n == "message_delta"][0]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] > 0


def test_count_tokens_equals_the_prompt_of_the_same_request(client):
    kwargs = dict(model="m", system=[{"type": "text", "text": "Be brief."}],
                  messages=USER + [{"role": "assistant", "content": "Hi."}, {"role": "user", "content": "Again"}])
    counted = client.messages.count_tokens(**kwargs)
    message = client.messages.create(max_tokens=1, **kwargs)
    assert counted.input_tokens == prompt_tokens(message) > 0
    assert client.messages.count_tokens(model="m", messages=USER).input_tokens < counted.input_tokens


def test_second_request_reads_the_prompt_cache(client):
    messages = [{"role": "user", "content": "a cacheable prompt " * 20}]
    first = client.messages.create(model="m", max_tokens=1, messages=messages)
    second = client.messages.create(model="m", max_tokens=1, messages=messages)
    assert second.usage.cache_read_input_tokens > 0
    assert prompt_tokens(first) == prompt_tokens(second)
    assert second.usage.input_tokens == prompt_tokens(second) - second.usage.cache_read_input_tokens


def test_auth_and_version_headers_are_accepted(server):
    for header in ("x-api-key: k\r\nanthropic-version: 2023-06-01\r\n", "Authorization: Bearer k\r\n"):
        resp = request(server.port, post_json("/v1/messages", {"model": "m", "max_tokens": 1, "messages": USER},
                                              headers=header))
        assert resp.status == 200 and resp.header("request-id")


# ---- errors ---------------------------------------------------------------------------

def anthropic_error(resp, status: int, kind: str) -> str:
    assert resp.status == status, resp.body
    body = resp.json()
    assert body["type"] == "error" and body["error"]["type"] == kind
    assert resp.header("request-id")
    return body["error"]["message"]


@pytest.mark.parametrize("body, needle", [
    ({"model": "m", "messages": USER}, "max_tokens"),
    ({"model": "m", "max_tokens": 5, "messages": []}, "messages"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}, "role"),
    ({"model": "m", "max_tokens": 5, "messages": USER, "temperature": 1.5}, "temperature"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}, "image"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "x"}}]}]}, "document"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "image", "source": {}}]}]}]},
     "messages[0].content[0].content[0].source"),
    ({"model": "m", "max_tokens": 5, "messages": USER, "tool_choice": {"type": "any"}}, "tool"),
    ({"model": "m", "max_tokens": 5, "messages": USER, "tools": [TIME],
      "tool_choice": {"type": "tool", "name": "nope"}}, "nope"),
    ({"model": "m", "max_tokens": 5, "messages": USER, "tools": [{"name": "t"}]}, "input_schema"),
    ({"model": "m", "max_tokens": 5, "messages": USER, "thinking": {"type": "enabled"}}, "budget_tokens"),
    ({"model": "m", "max_tokens": 5, "messages": USER, "stop_sequences": [1]}, "stop_sequences"),
])
def test_invalid_requests_are_400_invalid_request_error(server, body, needle):
    message = anthropic_error(request(server.port, post_json("/v1/messages", body)), 400, "invalid_request_error")
    assert needle in message


def test_unsupported_blocks_say_so(server):
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
        {"type": "text", "text": "look"}, {"type": "document", "source": {}}]}]}
    message = anthropic_error(request(server.port, post_json("/v1/messages", body)), 400, "invalid_request_error")
    assert "not supported" in message and "text and images" in message


def test_a_prompt_of_megabytes_with_a_cache_breakpoint_is_too_long_for_the_context(server):
    # past the 4 MiB a count may tokenize: still the context's error, with its numbers, not text_too_long
    text = [{"type": "text", "text": "hello " * 900_000, "cache_control": {"type": "ephemeral"}}]
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": text}]}
    resp = request(server.port, post_json("/v1/messages", body))
    anthropic_error(resp, 400, "invalid_request_error")
    error = resp.json()["error"]
    assert error["n_prompt_tokens"] > error["n_ctx"] > 0, error


def test_bad_json_and_the_sdk_error_class(server, client):
    resp = request(server.port, post_json("/v1/messages", b"{not json"))
    anthropic_error(resp, 400, "invalid_request_error")
    with pytest.raises(anthropic.BadRequestError) as err:
        client.messages.create(model="m", max_tokens=5, messages=USER, extra_body={"temperature": 3})
    assert err.value.body["error"]["type"] == "invalid_request_error"


def test_prompt_too_long_names_the_token_counts(server):
    body = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hello " * 5000}]}
    resp = request(server.port, post_json("/v1/messages", body))
    message = anthropic_error(resp, 400, "invalid_request_error")
    error = resp.json()["error"]
    assert error["n_prompt_tokens"] > error["n_ctx"] > 0
    assert str(error["n_prompt_tokens"]) in message and str(error["n_ctx"]) in message
    # the same request streamed fails before the stream starts: a plain HTTP error
    resp = request(server.port, post_json("/v1/messages", {**body, "stream": True}))
    anthropic_error(resp, 400, "invalid_request_error")


def test_not_found_and_method_not_allowed(server):
    anthropic_error(request(server.port, post_json("/v1/messages/nope", {})), 404, "not_found_error")
    resp = request(server.port, b"GET /v1/messages HTTP/1.1\r\nHost: localhost\r\n\r\n")
    anthropic_error(resp, 405, "invalid_request_error")
    assert "POST" in resp.header("allow")


def test_body_too_large_is_413_request_too_large(slow_server):
    head = (b"POST /v1/messages HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
            b"Content-Length: 200000\r\n\r\n")
    anthropic_error(request(slow_server.port, head), 413, "request_too_large")
    # other paths keep the OpenAI shape
    resp = request(slow_server.port, head.replace(b"/v1/messages", b"/v1/chat/completions"))
    assert resp.status == 413 and "message" in resp.json()["error"]


def test_full_queue_is_529_overloaded(slow_server):
    def long_stream(tag: str) -> bytes:
        return post_json("/v1/messages", {"model": "m", "max_tokens": 4000, "stream": True, "logit_bias": NO_EOG,
                                          "messages": [{"role": "user", "content": tag}]})
    running = RawConnection(slow_server.port)
    running.send(long_stream("running"))
    received = b""
    while b"event: message_start" not in received:   # admitted: the one slot is busy
        received += running.sock.recv(4096)
    queued = RawConnection(slow_server.port)
    queued.send(long_stream("queued"))            # waits for the slot: the queue (size 1) is full
    assert queued.sock.recv(4096).startswith(b"HTTP/1.1 200")
    try:
        resp = request(slow_server.port, post_json("/v1/messages", {"model": "m", "max_tokens": 5, "messages": USER}))
        anthropic_error(resp, 529, "overloaded_error")
        assert resp.header("retry-after")
        with pytest.raises(anthropic.APIStatusError) as err:
            anthropic_sdk(slow_server).messages.create(model="m", max_tokens=5, messages=USER)
        assert err.value.status_code == 529
    finally:
        running.close()
        queued.close()
    assert slow_server.wait_cancelled(request_id_of(received), "client went away")


# ---- long prefill, disconnects ---------------------------------------------------------

def test_pings_keep_a_long_prefill_alive(slow_server):
    body = {"model": "m", "max_tokens": 2, "messages": [{"role": "user", "content": "pings " + LONG_PROMPT * 2}]}
    status, events = raw_stream(slow_server.port, body)
    assert status == 200
    check_wire(events)
    # SSE comments carry no event: one may come first when the job waits behind another test's
    names = [n for n, _ in events if n != ":"]
    first_block = names.index("content_block_start") if "content_block_start" in names else names.index("message_delta")
    assert names[0] == "message_start" and names[1:first_block].count("ping") >= 3


def test_disconnect_mid_stream_cancels_the_job(slow_server):
    conn = RawConnection(slow_server.port)
    conn.send(post_json("/v1/messages", {"model": "m", "max_tokens": 4000, "stream": True, "logit_bias": NO_EOG,
                                         "messages": [{"role": "user", "content": "drop me"}]}))
    received = b""
    while received.count(b"event: content_block_delta") < 5:
        received += conn.sock.recv(4096)
    conn.close()
    assert slow_server.wait_cancelled(request_id_of(received), "client went away during the stream")
    quick = request(slow_server.port, post_json("/v1/messages", {"model": "m", "max_tokens": 2, "messages": USER}),
                    timeout=30)
    assert quick.status == 200


def test_disconnect_while_waiting_cancels_the_job(slow_server):
    conn = RawConnection(slow_server.port)
    conn.send(post_json("/v1/messages", {"model": "m", "max_tokens": 4000, "logit_bias": NO_EOG,
                                         "messages": [{"role": "user", "content": "leave me"}]}))
    deadline = time.monotonic() + 30            # the job is running: the client leaves while it waits
    while parse(request(slow_server.port, GET_METRICS).body.decode()).value("localserve_slots_busy") != 1:
        assert time.monotonic() < deadline, "the request never reached the runtime"
        time.sleep(0.05)
    reason = "client closed the connection while waiting"
    before = slow_server.log.count(reason)       # no response head, so no request-id: count new lines
    conn.close()
    deadline = time.monotonic() + 5
    while slow_server.log.count(reason) == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert slow_server.log.count(reason) == before + 1


# ---- tool use -------------------------------------------------------------------------

@pytest.mark.parametrize("choice", [{"type": "tool", "name": "get_weather"}, {"type": "any"}])
def test_forced_tool_use_whole_and_streamed(hermes, choice):
    client = anthropic_sdk(hermes)
    kwargs = dict(model="m", max_tokens=200, messages=[{"role": "user", "content": "Weather in Paris?"}],
                  tools=TOOLS, tool_choice=choice, extra_body={"temperature": 0})
    message = client.messages.create(**kwargs)
    assert message.stop_reason == "tool_use"
    uses = [b for b in message.content if b.type == "tool_use"]
    assert len(uses) >= 1 and uses[0].id.startswith("toolu_") and isinstance(uses[0].input, dict)
    if choice["type"] == "tool":
        assert len(uses) == 1 and uses[0].name == "get_weather"
        assert set(uses[0].input) == {"city", "days"} and 1 <= uses[0].input["days"] <= 7
    with client.messages.stream(**kwargs) as s:
        streamed = s.get_final_message()
    assert comparable(streamed) == comparable(message)


def test_tool_use_stream_on_the_wire(hermes):
    status, events = raw_stream(hermes.port, {"model": "m", "max_tokens": 200, "messages": USER, "tools": [TIME],
                                              "grammar": f'root ::= "Let me look. " "{TIME_CALL}"'})
    assert status == 200
    blocks = check_wire(events)
    assert [b["type"] for b in blocks] == ["text", "tool_use"]
    assert blocks[1]["name"] == "get_time" and blocks[1]["id"].startswith("toolu_") and blocks[1]["input"] == {}
    assert json.loads("".join(d["partial_json"] for d in blocks[1]["deltas"])) == {"zone": "UTC"}
    assert [d for n, d in events if n == "message_delta"][0]["delta"]["stop_reason"] == "tool_use"


def test_tool_use_tool_result_round_trip(hermes):
    client = anthropic_sdk(hermes)
    ask = [{"role": "user", "content": "What time is it in UTC?"}]
    message = client.messages.create(model="m", max_tokens=200, messages=ask, tools=TOOLS,
                                     tool_choice={"type": "tool", "name": "get_time"}, extra_body={"temperature": 0})
    (use,) = [b for b in message.content if b.type == "tool_use"]

    def history(result) -> list:
        return ask + [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, **result},
                                                   {"type": "text", "text": "Thanks."}]}]

    short = client.messages.count_tokens(model="m", messages=history({"content": "12:00"}), tools=TOOLS)
    longer = client.messages.count_tokens(model="m", tools=TOOLS, messages=history(
        {"content": [{"type": "text", "text": "12:00, a sunny noon"}], "is_error": True}))
    assert longer.input_tokens > short.input_tokens
    reply = client.messages.create(model="m", max_tokens=3, messages=history({"content": "12:00"}), tools=TOOLS)
    assert prompt_tokens(reply) == short.input_tokens and reply.usage.output_tokens <= 3


def test_disable_parallel_tool_use_keeps_one_call(hermes):
    client = anthropic_sdk(hermes)
    grammar = f'root ::= "{TIME_CALL}" "\\n" "{TIME_CALL}" " and a tail never generated"'
    kwargs = dict(model="m", max_tokens=200, messages=USER, tools=TOOLS, extra_body={"grammar": grammar})
    one = client.messages.create(tool_choice={"type": "auto", "disable_parallel_tool_use": True}, **kwargs)
    assert [b.type for b in one.content] == ["tool_use"] and one.stop_reason == "tool_use"
    two = [b for b in client.messages.create(**kwargs).content if b.type == "tool_use"]
    assert len(two) == 2 and two[0].id != two[1].id


def test_tool_choice_none_neither_renders_nor_parses(hermes):
    client = anthropic_sdk(hermes)
    message = client.messages.create(model="m", max_tokens=200, messages=USER, tools=TOOLS,
                                     tool_choice={"type": "none"}, extra_body={"grammar": f'root ::= "{TIME_CALL}"'})
    assert [b.type for b in message.content] == ["text"] and "<tool_call>" in message.content[0].text
    assert message.stop_reason == "end_turn"
    with_tools = client.messages.count_tokens(model="m", messages=USER, tools=TOOLS)
    assert prompt_tokens(message) < with_tools.input_tokens


# ---- thinking -------------------------------------------------------------------------

THINK_THEN_HELLO = 'root ::= "I should greet them." "</think>" "\\n\\n" "Hello there!"'


def test_thinking_block_whole_and_streamed(qwen3):
    client = anthropic_sdk(qwen3)
    kwargs = dict(model="m", max_tokens=100, messages=USER, thinking={"type": "enabled", "budget_tokens": 64},
                  extra_body={"grammar": THINK_THEN_HELLO, "temperature": 0})
    message = client.messages.create(**kwargs)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "I should greet them." and message.content[0].signature
    assert message.content[1].text == "Hello there!" and message.stop_reason == "end_turn"
    with client.messages.stream(**kwargs) as s:
        streamed = s.get_final_message()
    assert comparable(streamed) == comparable(message)
    status, events = raw_stream(qwen3.port, {"model": "m", "max_tokens": 100, "messages": USER, "temperature": 0,
                                             "grammar": THINK_THEN_HELLO, "thinking": kwargs["thinking"]})
    blocks = check_wire(events)
    assert [b["type"] for b in blocks] == ["thinking", "text"]
    assert blocks[0]["deltas"][-1]["signature"] == message.content[0].signature


def test_thinking_budget_closes_the_block_and_the_answer_follows(qwen3):
    client = anthropic_sdk(qwen3)
    a = token_ids(FAMILY_SPECIAL_TOKENS["qwen3"])["A"]
    kwargs = dict(model="m", max_tokens=30, messages=USER, thinking={"type": "enabled", "budget_tokens": 5},
                  extra_body={"logit_bias": {str(a): 100}, "temperature": 0})
    message = client.messages.create(**kwargs)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "A" * 5              # capped at the budget
    assert message.content[1].text.startswith("AAAA") and message.stop_reason == "max_tokens"
    with client.messages.stream(**kwargs) as s:
        streamed = s.get_final_message()
    assert comparable(streamed) == comparable(message)


def test_thinking_disabled_uses_the_template_switch(qwen3):
    client = anthropic_sdk(qwen3)
    off = client.messages.count_tokens(model="m", messages=USER, thinking={"type": "disabled"})
    on = client.messages.count_tokens(model="m", messages=USER, thinking={"type": "enabled", "budget_tokens": 2000})
    assert off.input_tokens > on.input_tokens           # "<think>\n\n</think>\n\n" against "<think>\n"
    message = client.messages.create(model="m", max_tokens=20, messages=USER, thinking={"type": "disabled"},
                                     extra_body={"grammar": 'root ::= "Hi!"'})
    assert [b.type for b in message.content] == ["text"] and message.content[0].text == "Hi!"


def test_signed_thinking_comes_back_and_forged_is_400(qwen3):
    client = anthropic_sdk(qwen3)
    grammar = f'root ::= "Check the clock." "</think>" "\\n\\n" "{TIME_CALL}"'
    message = client.messages.create(model="m", max_tokens=100, messages=USER, tools=[TIME],
                                     extra_body={"grammar": grammar})
    assert [b.type for b in message.content] == ["thinking", "tool_use"] and message.stop_reason == "tool_use"
    thinking, use = message.content
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "12:00"}]}

    def history(blocks: list) -> list:
        return USER + [{"role": "assistant", "content": blocks}, result]

    returned = [b.model_dump(exclude_none=True) for b in message.content]
    reply = client.messages.create(model="m", max_tokens=2, messages=history(returned), tools=[TIME])
    # Qwen3 shows the reasoning of an unfinished tool loop: the thinking block is in the prompt
    without = client.messages.count_tokens(model="m", messages=history(returned[1:]), tools=[TIME])
    assert prompt_tokens(reply) > without.input_tokens

    for forged in ({**returned[0], "thinking": "Something else."}, {**returned[0], "signature": "AAAA"},
                   {"type": "thinking", "thinking": thinking.thinking}):
        with pytest.raises(anthropic.BadRequestError) as err:
            client.messages.create(model="m", max_tokens=2, messages=history([forged, returned[1]]), tools=[TIME])
        assert "signature" in err.value.body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError):
        client.messages.count_tokens(model="m", messages=history([{**returned[0], "signature": "x"}, returned[1]]),
                                     tools=[TIME])


def test_models_api_in_anthropic_shape(server):
    client = anthropic_sdk(server)
    models = client.models.list()
    assert [m.id for m in models.data] == ["tiny"] and models.data[0].type == "model"
    assert client.models.retrieve("tiny").display_name == "tiny"
