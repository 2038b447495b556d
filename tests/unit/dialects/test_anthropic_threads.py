"""Message Threads (`thread`, which @anthropic-ai/sdk's toolRunner sends), on a real store: a create
is the request as sent and its reply starts a thread; a continue is answered as the thread's whole
conversation with its own messages after, and its reply moves the thread on. The misses the SDK
replays on are in the API's shape (`details.error_code`), and malformed threads are 400s."""

from __future__ import annotations

import pytest

from localserve.dialects.anthropic.errors import ANTHROPIC_ERRORS, anthropic_error_body
from localserve.dialects.anthropic.threads import open_thread
from localserve.errors import ApiError
from localserve.store.store import Store
from localserve.store.threads import ThreadRecords

TOOLS = [{"name": "read_file", "input_schema": {"type": "object"}}]
ASK = {"role": "user", "content": "read my notes"}
CALL = [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "notes.txt"}}]
RESULT = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"}]}


@pytest.fixture
def store(tmp_path):
    s = Store(str(tmp_path / "localserve.db"))
    yield s
    s.close()


@pytest.fixture
def records(store):
    return ThreadRecords(store.scoped("alice"))


def reply(message_id, content):
    return {"id": message_id, "type": "message", "role": "assistant", "content": content}


def create(records, **extra):
    body = {"model": "m", "max_tokens": 64, "system": "be brief", "tools": TOOLS, "messages": [ASK],
            "thread": {"type": "create"}, **extra}
    turn = open_thread(body, records)
    turn.keep(reply("msg_1", CALL))
    turn.close()
    return turn


def continuing(previous, messages, **extra):
    return {"model": "m", "max_tokens": 32, "messages": messages,
            "thread": {"type": "continue", "previous_message_id": previous}, **extra}


def refused(body, records) -> ApiError:
    with pytest.raises(ApiError) as raised:
        open_thread(body, records)
    return raised.value


@pytest.mark.parametrize("body", [{}, {"thread": None}])
def test_a_request_without_a_thread_is_no_thread_s(body, records):
    assert open_thread(body, records) is None


def test_a_create_is_the_request_as_sent_and_nothing_is_held_without_a_store():
    assert open_thread({"messages": [ASK], "thread": {"type": "create"}}, None) is None


def test_a_continue_is_the_whole_conversation_with_the_thread_s_system_and_tools(records):
    turn = create(records)
    assert "thread" not in turn.body and turn.body["messages"] == [ASK]
    body = continuing("msg_1", [RESULT], tool_choice={"type": "any"}, temperature=0.5)
    following = open_thread(body, records)
    assert following.body == {"model": "m", "max_tokens": 32, "system": "be brief", "tools": TOOLS,
                              "tool_choice": {"type": "any"}, "temperature": 0.5,
                              "messages": [ASK, {"role": "assistant", "content": CALL}, RESULT]}
    following.keep(reply("msg_2", [{"type": "text", "text": "It says hello."}]))
    following.close()
    # the thread moved on: from msg_2, with every turn and reply held
    third = open_thread(continuing("msg_2", [{"role": "user", "content": "thanks"}]), records)
    assert third.body["messages"] == [ASK, {"role": "assistant", "content": CALL}, RESULT,
                                      {"role": "assistant", "content": [{"type": "text", "text": "It says hello."}]},
                                      {"role": "user", "content": "thanks"}]


def test_a_continue_with_no_new_message_resumes_the_held_turn(records):
    create(records)
    turn = open_thread(continuing("msg_1", []), records)
    assert turn.body["messages"] == [ASK, {"role": "assistant", "content": CALL}]


def test_a_reply_with_no_content_adds_no_empty_turn(records):
    turn = open_thread({"messages": [ASK], "thread": {"type": "create"}}, records)
    turn.keep(reply("msg_1", []))
    assert open_thread(continuing("msg_1", [RESULT]), records).body["messages"] == [ASK, RESULT]


def test_a_continue_that_keeps_no_reply_leaves_the_thread_where_it_was(records):
    create(records)
    failed = open_thread(continuing("msg_1", [RESULT]), records)
    failed.close()                 # the answer failed: nothing kept, the claim let go
    again = open_thread(continuing("msg_1", [RESULT]), records)
    assert again.body["messages"][-1] == RESULT


def error_of(error: ApiError) -> tuple[int, dict]:
    return ANTHROPIC_ERRORS.status(error.status), anthropic_error_body(error)["error"]


def test_an_unknown_or_another_key_s_reply_is_the_not_found_the_sdk_replays_on(store, records):
    create(records)
    for previous, own in (("msg_nope", records), ("msg_1", ThreadRecords(store.scoped("bob")))):
        status, error = error_of(refused(continuing(previous, [RESULT]), own))
        # the SDK reads error.details.error_code to choose ThreadNotFoundError and replay
        assert status == 404 and error["type"] == "not_found_error"
        assert error["details"] == {"error_code": "thread_not_found"} and previous in error["message"]


def test_without_a_store_every_continue_is_not_found():
    status, error = error_of(refused(continuing("msg_1", [RESULT]), None))
    assert status == 404 and error["details"] == {"error_code": "thread_not_found"}
    assert "--no-store" in error["message"]


def test_a_reply_continued_already_or_being_continued_is_a_400_with_its_code(records):
    create(records)
    running = open_thread(continuing("msg_1", [RESULT]), records)
    status, error = error_of(refused(continuing("msg_1", [RESULT]), records))
    assert status == 400 and error["details"] == {"error_code": "thread_continue_in_flight"}
    running.keep(reply("msg_2", [{"type": "text", "text": "done"}]))
    running.close()
    status, error = error_of(refused(continuing("msg_1", [RESULT]), records))
    assert status == 400 and error["type"] == "invalid_request_error"
    assert error["details"] == {"error_code": "thread_already_continued"}


@pytest.mark.parametrize("field, value", [("system", "be long"), ("tools", TOOLS), ("tools", [])])
def test_a_continue_that_sends_the_thread_s_own_fields_is_a_400_and_claims_nothing(records, field, value):
    create(records)
    error = refused(continuing("msg_1", [RESULT], **{field: value}), records)
    assert error.status == 400 and error.param == field
    assert open_thread(continuing("msg_1", [RESULT]), records) is not None


def test_a_continue_s_system_of_claude_code_s_billing_header_alone_is_no_change(records):
    create(records)
    billing = [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332; cch=0f3a;"}]
    turn = open_thread(continuing("msg_1", [RESULT], system=billing), records)
    assert turn.body["system"] == "be brief"
    turn.close()
    error = refused(continuing("msg_1", [RESULT], system=[*billing, {"type": "text", "text": "be long"}]), records)
    assert error.status == 400 and error.param == "system"


@pytest.mark.parametrize("thread, param", [
    ("create", "thread"),
    ([], "thread"),
    ({}, "thread.type"),
    ({"type": "resume"}, "thread.type"),
    ({"type": "continue"}, "thread.previous_message_id"),
    ({"type": "continue", "previous_message_id": 7}, "thread.previous_message_id"),
    ({"type": "continue", "previous_message_id": ""}, "thread.previous_message_id"),
])
def test_a_malformed_thread_is_a_400_naming_its_field(records, thread, param):
    error = refused({"thread": thread}, records)
    assert error.status == 400 and error.param == param


def test_a_continue_s_messages_must_be_an_array(records):
    create(records)
    error = refused(continuing("msg_1", {"role": "user"}), records)
    assert error.status == 400 and error.param == "messages"
