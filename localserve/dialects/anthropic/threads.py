"""`thread`: Anthropic's Message Threads, as the TypeScript SDK's `toolRunner` sends them by
default (`@anthropic-ai/sdk` 1.17): the first turn `{"type": "create"}` with the whole
conversation, each later one `{"type": "continue", "previous_message_id": ID}` with only the
new messages and no `system` or `tools`, which the server holds (store/threads.py).

What a thread holds is what the client would otherwise send again: the `system` and `tools` of
its create, and every turn's messages each followed by its reply as `{"role": "assistant",
"content": reply.content}`. A continue is answered as the whole conversation would be: the
held messages, then its own; its other fields (model, max_tokens, tool_choice, thinking,
context_management...) are its own turn's, as the SDK sends them every turn. So its prompt is
the one the last turn's prompt and reply make, and the prompt cache serves that prefix.

Only a reply that ended is kept (a stream cut short keeps nothing: the SDK then starts a new
thread); a continue that fails leaves the thread at the reply it named. The answers the SDK
acts on, in the API's shape (`error.details.error_code`): 404 `thread_not_found` (no such reply
for this key, expired, evicted, or --no-store: nothing is held) and 400
`thread_already_continued` / `thread_continue_in_flight`: on each the SDK sends the whole
conversation again under a new thread. A continue that sends `system` or `tools` is a 400:
the thread's own are the ones it runs with (a `system` of Claude Code's per-request billing
header alone, which its continues carry, is no change and is dropped).
"""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, field

from ...errors import ApiError, shown
from ...store.store import new_id
from ...store.threads import ALREADY_CONTINUED, IN_FLIGHT, NOT_FOUND, HeldThread, ThreadMiss, ThreadRecords
from ..fields import invalid, kind_of
from .input import BILLING_HEADER

log = logging.getLogger("localserve.anthropic")

THREAD_NOT_FOUND = "thread_not_found"
HELD_FIELDS = ("system", "tools")      # a create's; a continue runs with them and may not send its own
REPLAY = "; send the whole conversation with thread {\"type\": \"create\"}"
MISSES = {       # ThreadMiss reason → (status, error_code, what happened)
    NOT_FOUND: (404, THREAD_NOT_FOUND, "no thread holds previous_message_id '{id}' for this key"),
    ALREADY_CONTINUED: (400, "thread_already_continued",
                        "'{id}' has been continued already: a thread continues from its latest reply, once"),
    IN_FLIGHT: (400, "thread_continue_in_flight", "another request is continuing from '{id}'"),
}


@dataclass
class ThreadTurn:
    """One request's turn of a thread: the request as a whole conversation (`body`), and how its
    reply is kept. A create starts a thread; a continue holds its thread's claim until close()."""
    body: dict
    records: ThreadRecords
    sent: dict                        # what the thread holds of this request: a create's system and tools
    messages: list                    # the messages this request sent
    held: HeldThread | None = None    # a continue's thread
    kept: bool = field(default=False, init=False)

    def keep(self, message: dict) -> None:
        """The turn's reply (a whole Messages response) joins the thread, once; a store that fails
        costs only the thread (the next continue is a thread_not_found, and the SDK replays)."""
        if self.kept:
            return
        self.kept = True
        reply = [{"role": "assistant", "content": message["content"]}] if message["content"] else []
        held = self.held.state if self.held is not None else self.sent
        state = {**held, "messages": [*held.get("messages", []), *self.messages, *reply]}
        try:
            if self.held is None:
                still = self.records.start(new_id("thread"), message["id"], state)
            else:
                still = self.records.advance(self.held, message["id"], state)
        except sqlite3.Error as exc:
            log.warning("thread of %s not kept: %s", message["id"], exc)
            return
        if not still:
            log.info("thread of %s not kept: past the store's bounds for threads", message["id"])

    def close(self) -> None:
        """The request is over: a continue that kept no reply leaves its thread where it was."""
        if self.held is not None and not self.kept:
            try:
                self.records.release(self.held)
            except sqlite3.Error as exc:
                log.warning("thread claim on %s not released: %s", self.held.previous_message_id, exc)


def open_thread(body: dict, records: ThreadRecords | None) -> ThreadTurn | None:
    """The request's turn of a thread, or None for a request that is no thread's (none asked, or a
    create where nothing is held: --no-store). A continue claims its thread here: close() the
    turn when the request is over."""
    thread = body.get("thread")
    if thread is None:
        return None
    if not isinstance(thread, dict):
        raise invalid("thread", f"expected an object, got {kind_of(thread)}")
    kind = thread.get("type")
    if kind not in ("create", "continue"):
        raise invalid("thread.type", f"expected 'create' or 'continue', got {shown(str(kind))}")
    rest = {key: value for key, value in body.items() if key != "thread"}
    if kind == "create":
        if records is None:
            return None
        return ThreadTurn(rest, records, {key: body[key] for key in HELD_FIELDS if key in body},
                          body.get("messages") if isinstance(body.get("messages"), list) else [])
    previous = thread.get("previous_message_id")
    if not isinstance(previous, str) or not previous:
        raise invalid("thread.previous_message_id", f"expected a message id, got {kind_of(previous)}")
    if per_request(body.get("system")):
        rest.pop("system")
    for name in HELD_FIELDS:
        if rest.get(name) is not None:
            raise invalid(name, f"a thread continue runs with its thread's {name}: leave it out, or send the "
                                f"whole conversation with thread {{\"type\": \"create\"}} to change it")
    messages = body.get("messages", [])
    if not isinstance(messages, list):
        raise invalid("messages", f"expected an array, got {kind_of(messages)}")
    held = claim(records, previous)
    state = held.state
    whole = {**rest, **{key: state[key] for key in HELD_FIELDS if key in state},
             "messages": [*state["messages"], *messages]}
    return ThreadTurn(whole, records, {}, messages, held)


def per_request(system: object) -> bool:
    """A continue's `system` that only says what changes per request, which Claude Code sends on
    a continue (its billing header: input.py leaves it out of every prompt): no change of the
    thread's system, so it is dropped, not refused."""
    return isinstance(system, list) and bool(system) and all(
        isinstance(block, dict) and isinstance(block.get("text"), str) and block["text"].startswith(BILLING_HEADER)
        for block in system)


def claim(records: ThreadRecords | None, previous: str) -> HeldThread:
    if records is None:
        raise miss(NOT_FOUND, previous, " (this server holds no threads: --no-store)")
    try:
        return records.claim(previous)
    except ThreadMiss as exc:
        raise miss(exc.reason, previous) from None


def miss(reason: str, previous: str, why: str = "") -> ApiError:
    status, code, message = MISSES[reason]
    return ApiError(status, message.format(id=shown(previous)) + why + REPLAY,
                    param="thread.previous_message_id", extra={"details": {"error_code": code}})
