"""Message Threads on the real server (a scripted model that calls its tool, then answers the
result), with two API keys and a store: the Python SDK's own thread (`client.beta.messages.thread`)
sends each turn's new messages only, whole and streamed, and so does its tool runner; raw requests check what a client that
goes wrong gets: another key's, an unknown or a stale reply id, a malformed thread, a continue
that sends its own system, each in Anthropic's error shape with the code the SDKs act on, and
the server serves the thread on afterwards; a turn paused after its compaction is resumed by a
continue with no message."""

from __future__ import annotations

import httpx
import pytest
from anthropic import beta_tool

from clients import anthropic_sdk
from conftest import ServerProcess
from scripted_model import tool_loop_script, write_scripted_gguf
from sse import parse_sse
from test_anthropic_compaction import ANSWER as COMPACTED_ANSWER, CONTEXT, SUMMARY, compact_edit, history

ARGUMENTS = {"path": "notes.txt"}
ANSWER = "It says hello."
KEYS = ("alice-key", "bob-key")
TOOL = {"name": "read_file", "description": "read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}}
ASK = {"role": "user", "content": "read my notes"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = write_scripted_gguf(tmp_path_factory.mktemp("threads") / "scripted.gguf",
                               tool_loop_script("read_file", ARGUMENTS, ANSWER))
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1", "--api-key", KEYS[0], "--api-key", KEYS[1],
                        "--data-dir", str(tmp_path_factory.mktemp("threads-data")))
    yield srv
    srv.stop()


def post(server, body: dict, key: str = KEYS[0]) -> httpx.Response:
    return httpx.post(server.base_url + "/v1/messages", json=body, timeout=60,
                      headers={"x-api-key": key, "anthropic-version": "2023-06-01",
                               "anthropic-beta": "message-threads-2026-08-12,compact-2026-01-12"})


def create(server, key: str = KEYS[0]) -> dict:
    reply = post(server, {"model": "scripted", "max_tokens": 64, "tools": [TOOL], "messages": [ASK],
                          "thread": {"type": "create"}}, key)
    assert reply.status_code == 200, reply.text
    assert reply.json()["stop_reason"] == "tool_use"
    return reply.json()


def result_of(message: dict) -> dict:
    call = next(block for block in message["content"] if block["type"] == "tool_use")
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call["id"], "content": "hello"}]}


def continuing(previous: dict | str, messages: list, **extra) -> dict:
    previous_id = previous if isinstance(previous, str) else previous["id"]
    return {"model": "scripted", "max_tokens": 64, "messages": messages,
            "thread": {"type": "continue", "previous_message_id": previous_id}, **extra}


def error_of(reply: httpx.Response, status: int) -> dict:
    assert reply.status_code == status, reply.text
    body = reply.json()
    assert body["type"] == "error"
    return body["error"]


def text_of(message: dict) -> str:
    return "".join(block["text"] for block in message["content"] if block["type"] == "text")


@pytest.mark.parametrize("streamed", [False, True])
def test_the_python_sdk_s_thread_sends_only_the_new_turn_and_is_answered(server, streamed):
    thread = anthropic_sdk(server, api_key=KEYS[0]).beta.messages.thread(model="scripted", max_tokens=64,
                                                                         tools=[TOOL])
    first = thread.send(ASK)
    assert first.stop_reason == "tool_use" and first.content[-1].input == ARGUMENTS
    assert thread.previous_message_id == first.id
    result = result_of(first.model_dump())
    if streamed:
        with thread.stream(result) as stream:
            second = stream.get_final_message()
    else:
        second = thread.send(result)
    assert second.stop_reason == "end_turn" and "".join(b.text for b in second.content if b.type == "text") == ANSWER
    assert thread.previous_message_id == second.id            # no replay: the server went on from the first
    assert f"continues the thread at {first.id} (2 messages held, 1 new)" in server.log
    assert second.usage.cache_read_input_tokens > 0           # the first turn's prompt and reply, cached


def test_the_python_sdk_s_tool_runner_threads_its_loop_and_the_continue_is_served(server):
    ran = []

    @beta_tool
    def read_file(path: str) -> str:
        """read a file"""
        ran.append(path)
        return "hello"

    served = server.log.count("continues the thread at ")
    runner = anthropic_sdk(server, api_key=KEYS[1]).beta.messages.tool_runner(
        model="scripted", max_tokens=64, tools=[read_file], messages=[ASK], max_iterations=3)
    last = runner.until_done()
    assert ran == [ARGUMENTS["path"]] and last.stop_reason == "end_turn"
    assert "".join(b.text for b in last.content if b.type == "text") == ANSWER
    assert server.log.count("continues the thread at ") == served + 1


def test_another_key_s_reply_is_not_found_and_leaves_the_thread_to_its_key(server):
    first = create(server, KEYS[0])
    error = error_of(post(server, continuing(first, [result_of(first)]), KEYS[1]), 404)
    assert error["type"] == "not_found_error" and error["details"] == {"error_code": "thread_not_found"}
    unknown = error_of(post(server, continuing("msg_" + "x" * 24, [result_of(first)]), KEYS[1]), 404)
    assert unknown["message"].replace("x" * 24, first["id"][4:]) == error["message"]   # nothing tells them apart
    mine = post(server, continuing(first, [result_of(first)]), KEYS[0])
    assert mine.status_code == 200 and text_of(mine.json()) == ANSWER


def test_a_stale_reply_id_is_already_continued_and_the_latest_goes_on(server):
    first = create(server)
    second = post(server, continuing(first, [result_of(first)])).json()
    error = error_of(post(server, continuing(first, [result_of(first)])), 400)
    assert error["type"] == "invalid_request_error"
    assert error["details"] == {"error_code": "thread_already_continued"}
    third = post(server, continuing(second, [{"role": "user", "content": "and again"}]))
    assert third.status_code == 200, third.text


def test_a_continue_streamed_is_kept_like_a_whole_one(server):
    first = create(server)
    reply = post(server, continuing(first, [result_of(first)], stream=True))
    assert reply.status_code == 200
    events = parse_sse(reply.content)
    assert [name for name, _ in events][-1] == "message_stop"
    message_id = next(data["message"]["id"] for name, data in events if name == "message_start")
    error = error_of(post(server, continuing(first, [result_of(first)])), 400)
    assert error["details"] == {"error_code": "thread_already_continued"}
    assert post(server, continuing(message_id, [{"role": "user", "content": "more"}])).status_code == 200


@pytest.mark.parametrize("thread, status, code", [
    ({"type": "continue", "previous_message_id": "msg_unknown"}, 404, "thread_not_found"),
    ({"type": "continue"}, 400, None),
    ({"type": "continue", "previous_message_id": 12}, 400, None),
    ({"type": "resume"}, 400, None),
    ("create", 400, None),
])
def test_a_bad_continue_is_answered_in_anthropic_s_shape_and_the_server_goes_on(server, thread, status, code):
    error = error_of(post(server, {"model": "scripted", "max_tokens": 8, "messages": [ASK], "thread": thread}), status)
    assert error.get("details", {}).get("error_code") == code
    assert create(server)["id"].startswith("msg_")


def test_a_continue_refused_for_what_it_sends_leaves_the_thread_waiting(server):
    first = create(server)
    error = error_of(post(server, continuing(first, [result_of(first)], system="be brief")), 400)
    assert error["type"] == "invalid_request_error" and "system" in error["message"]
    assert error_of(post(server, continuing(first, {"role": "user"})), 400)["type"] == "invalid_request_error"
    # refused once the thread was claimed, by the reading of the whole conversation: the claim is let go
    bad = error_of(post(server, continuing(first, [{"role": "user", "content": [{"type": "bogus"}]}])), 400)
    assert bad["type"] == "invalid_request_error" and "details" not in bad
    reply = post(server, continuing(first, [result_of(first)]))
    assert reply.status_code == 200 and text_of(reply.json()) == ANSWER


@pytest.fixture(scope="module")
def compacting(models_dir, tmp_path_factory):
    path = write_scripted_gguf(models_dir / "scripted-thread-compaction.gguf", [[COMPACTED_ANSWER]],
                               summary=[SUMMARY])
    srv = ServerProcess(path, "--model-id", "scripted", "--ctx-size", str(CONTEXT),
                        "--data-dir", str(tmp_path_factory.mktemp("thread-compaction-data")))
    yield srv
    srv.stop()


@pytest.mark.parametrize("stream", [False, True])
def test_a_turn_paused_after_its_compaction_is_resumed_by_a_continue_with_no_message(compacting, stream):
    def ask(body: dict) -> dict:
        reply = post(compacting, {"model": "m", "max_tokens": 50, "stream": stream, **body})
        assert reply.status_code == 200, reply.text
        if not stream:
            return reply.json()
        events = parse_sse(reply.content)
        start = next(data["message"] for name, data in events if name == "message_start")
        stop = next(data["delta"]["stop_reason"] for name, data in events if name == "message_delta")
        return {"id": start["id"], "stop_reason": stop}

    paused = ask({"messages": history(), "thread": {"type": "create"},
                  "context_management": compact_edit(pause_after_compaction=True)})
    assert paused["stop_reason"] == "compaction"
    # the thread holds the conversation and the compaction block: an empty turn goes on from the summary
    answer = post(compacting, continuing(paused["id"], [], model="m", max_tokens=50,
                                         context_management=compact_edit()))
    assert answer.status_code == 200, answer.text
    assert text_of(answer.json()) == COMPACTED_ANSWER and answer.json().get("usage", {}).get("iterations") is None
