"""`thread`: Anthropic's Message Threads, as the TypeScript SDK's `toolRunner` sends them by
default (`@anthropic-ai/sdk` 1.17): the first turn `{"type": "create"}` with the whole
conversation, each later one `{"type": "continue", "previous_message_id": ID}` with only the
new messages and no `system` or `tools`, which the server is meant to hold.

This server holds no thread: a create is the plain request it carries, and a continue is 404
`not_found_error` with `details.error_code` `thread_not_found`, the answer the API gives for a
thread it no longer has and on which the SDK replays the whole conversation under a new thread.
Without it the continue's bare tool results would run alone, without their tools.
"""

from __future__ import annotations

from ...errors import ApiError, shown
from ..fields import invalid, kind_of

THREAD_NOT_FOUND = "thread_not_found"


def read_thread(body: dict) -> None:
    """Refuses a `thread` this server cannot serve: a continue (404), a malformed one (400)."""
    thread = body.get("thread")
    if thread is None:
        return
    if not isinstance(thread, dict):
        raise invalid("thread", f"expected an object, got {kind_of(thread)}")
    kind = thread.get("type")
    if kind == "create":
        return
    if kind != "continue":
        raise invalid("thread.type", f"expected 'create' or 'continue', got {shown(str(kind))}")
    previous = thread.get("previous_message_id")
    if not isinstance(previous, str) or not previous:
        raise invalid("thread.previous_message_id", f"expected a message id, got {kind_of(previous)}")
    raise ApiError(404, f"no thread state for previous_message_id '{shown(previous)}': this server keeps none; "
                        "send the whole conversation with thread {\"type\": \"create\"}",
                   param="thread.previous_message_id", extra={"details": {"error_code": THREAD_NOT_FOUND}})
