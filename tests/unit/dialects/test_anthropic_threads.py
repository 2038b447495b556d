"""Message Threads (`thread`, which @anthropic-ai/sdk's toolRunner sends): a create is the plain
request, a continue is the 404 `thread_not_found` on which the SDK replays the whole conversation."""

from __future__ import annotations

import pytest

from localserve.dialects.anthropic.errors import ANTHROPIC_ERRORS, anthropic_error_body
from localserve.dialects.anthropic.threads import read_thread
from localserve.errors import ApiError


@pytest.mark.parametrize("body", [{}, {"thread": None}, {"thread": {"type": "create"}}])
def test_no_thread_or_a_new_one_is_the_plain_request(body):
    read_thread(body)


def test_a_continue_is_the_not_found_the_sdk_replays_on():
    with pytest.raises(ApiError) as raised:
        read_thread({"thread": {"type": "continue", "previous_message_id": "msg_01"}})
    error = raised.value
    assert ANTHROPIC_ERRORS.status(error.status) == 404
    body = anthropic_error_body(error)
    # the SDK reads error.details.error_code to choose ThreadNotFoundError and replay
    assert body["error"]["type"] == "not_found_error"
    assert body["error"]["details"] == {"error_code": "thread_not_found"}
    assert "msg_01" in body["error"]["message"]


@pytest.mark.parametrize("thread, param", [
    ("create", "thread"),
    ([], "thread"),
    ({}, "thread.type"),
    ({"type": "resume"}, "thread.type"),
    ({"type": "continue"}, "thread.previous_message_id"),
    ({"type": "continue", "previous_message_id": 7}, "thread.previous_message_id"),
    ({"type": "continue", "previous_message_id": ""}, "thread.previous_message_id"),
])
def test_a_malformed_thread_is_a_400_naming_its_field(thread, param):
    with pytest.raises(ApiError) as raised:
        read_thread({"thread": thread})
    assert raised.value.status == 400 and raised.value.param == param
