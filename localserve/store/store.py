"""Embedded SQLite storage for the Responses API: responses, their stream events, conversations
(and, in the same database, Anthropic's message threads: threads.py).

Threading: one connection, opened with check_same_thread=False and guarded by one lock, serves
every thread. Connection threads come and go (one per client), so per-thread connections would
pile up until garbage collection and could not all be closed by close(); SQLite serialises
writers anyway, and each statement here takes microseconds next to seconds of generation. One
connection also means no SQLITE_BUSY between our own threads; busy_timeout covers a second
process on the same file.

Durability: WAL with synchronous=NORMAL. A committed transaction survives the process being
killed (kill -9); only a power loss can drop the last few commits, never corrupt the file.

Each Response object is stored whole, as JSON, in `responses.response`: output, usage, error,
incomplete_details and metadata live there and only there, so an update cannot leave a copy
stale. The columns beside it (status, model, chain and conversation ids, flags) are what queries
filter on; status is kept equal to the JSON's "status" by every write.

Scopes: each response and conversation belongs to the scope of the API key that made it
(wire/access.py). A Store finds and makes them in its own scope only; `scoped(scope)` is a view
of the same database in another (handlers take the one of the request's key). The scope of a
Store opened plainly is "", the one scope of a server with a single key or none.
"""

from __future__ import annotations

import copy
import os
import sqlite3
import threading
import time
import uuid
from contextlib import contextmanager

import orjson

from .private import private_database, private_dir

from .sql import (
    DELETE_CONVERSATION, DELETE_ITEM, DELETE_RESPONSE, INSERT_CONVERSATION, INSERT_EVENT, INSERT_ITEM,
    INSERT_RESPONSE, MAX_CHAIN_DEPTH, MIGRATIONS, SELECT_ALL_ITEMS, SELECT_CHAIN, SELECT_CONVERSATION,
    SELECT_EVENTS, SELECT_INPUT_ITEMS, SELECT_INTERRUPTED, SELECT_ITEM, SELECT_ITEMS_ASC, SELECT_ITEMS_DESC,
    SELECT_ITEM_POSITION, SELECT_LAST_SEQUENCE, SELECT_NEXT_POSITION, SELECT_RESPONSE,
    SELECT_STATUS, UPDATE_CONVERSATION, UPDATE_RESPONSE, RELEASE_ALL_THREADS)


def _dumps(value) -> str:
    return orjson.dumps(value).decode()


_loads = orjson.loads


INTERRUPTED_ERROR = {
    "code": "server_error",
    "message": "the server stopped while this response was running",
}
ITEM_ID_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "reasoning": "rs",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "local_shell_call": "lsh",
}
ORDERS = ("asc", "desc")


def new_id(prefix: str) -> str:
    """A fresh id such as "resp_3f2a…" (prefix, underscore, 32 hex digits)."""
    return f"{prefix}_{uuid.uuid4().hex}"


def with_item_ids(items: list[dict]) -> list[dict]:
    """Copies of the items, each with an id; an item without "type" is a message."""
    return [
        item if item.get("id") else {
            **item, "id": new_id(ITEM_ID_PREFIXES.get(item.get("type", "message"), "item"))
        }
        for item in items
    ]


def _with_output_ids(response: dict) -> dict:
    if "output" not in response:
        return response
    return {**response, "output": with_item_ids(response["output"] or [])}


def _check_order(order: str) -> None:
    if order not in ORDERS:
        raise ValueError(f"order must be 'asc' or 'desc', not {order!r}")


def page(items: list[dict], *, after: str | None, limit: int, order: str):
    """One page of an in-memory list: (items, has_more); an unknown `after` gives no items."""
    _check_order(order)
    ordered = items if order == "asc" else items[::-1]
    start = 0
    if after is not None:
        ids = [item.get("id") for item in ordered]
        if after not in ids:
            return [], False
        start = ids.index(after) + 1
    chosen = ordered[start:start + limit]
    return chosen, start + limit < len(ordered)


class Store:
    def __init__(self, path: str, *, recover: bool = True):
        private_dir(os.path.dirname(os.path.abspath(path)))
        private_database(path)
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            path, timeout=10.0, isolation_level=None, check_same_thread=False
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.execute("PRAGMA busy_timeout=10000")
        self._migrate()
        self.recovered = self.recover_interrupted() if recover else 0
        if recover:          # a continue the last process was running ended with it (threads.py)
            self._write(RELEASE_ALL_THREADS, ())
        self.scope = ""

    def scoped(self, scope: str) -> Store:
        """This store as the key of `scope` sees it: the same connection and lock, its rows only."""
        view = copy.copy(self)
        view.scope = scope
        return view

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @contextmanager
    def _tx(self):
        """One write transaction, taken at once (IMMEDIATE) so reads inside it stay valid."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def transaction(self):
        """A write transaction for the records kept beside the store's own (threads.py)."""
        return self._tx()

    def _one(self, sql: str, args: tuple):
        with self._lock:
            return self._db.execute(sql, args).fetchone()

    def _all(self, sql: str, args: tuple) -> list:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _write(self, sql: str, args: tuple) -> int:
        with self._lock:
            return self._db.execute(sql, args).rowcount

    def _migrate(self) -> None:
        # The version is read inside the transaction, so two processes opening a new file
        # at once cannot both apply the same migration.
        with self._tx() as db:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            for number, statements in enumerate(MIGRATIONS[version:], start=version + 1):
                for statement in statements:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number}")

    # ---- responses ----

    def create_response(self, response: dict, *, input_items: list[dict],
                        request: dict) -> list[dict]:
        """Store a new response; returns its input items as stored (with ids)."""
        items = with_item_ids(input_items)
        response = _with_output_ids(response)
        conversation = response.get("conversation") or request.get("conversation")
        if isinstance(conversation, dict):
            conversation = conversation.get("id")
        self._write(INSERT_RESPONSE, (
            response["id"], int(response.get("created_at") or time.time()),
            response["status"], response.get("model"), response.get("previous_response_id"),
            conversation, bool(response.get("background")), response.get("store", True) is not False,
            _dumps(request), _dumps(items), _dumps(response), self.scope,
        ))
        return items

    def update_response(self, response: dict, *,
                        only_if_in: tuple[str, ...] | None = None) -> bool:
        """Replace the stored Response object; with only_if_in, only while its status is one
        of those (so a finishing job cannot overwrite a cancel). True when written."""
        response = _with_output_ids(response)
        with self._tx() as db:
            row = db.execute(SELECT_STATUS, (response["id"], self.scope)).fetchone()
            if row is None or (only_if_in is not None and row[0] not in only_if_in):
                return False
            db.execute(UPDATE_RESPONSE, (response["status"], _dumps(response), response["id"]))
            return True

    def get_response(self, response_id: str) -> dict | None:
        row = self._one(SELECT_RESPONSE, (response_id, self.scope))
        return None if row is None else _loads(row[0])

    def delete_response(self, response_id: str) -> bool:
        return self._write(DELETE_RESPONSE, (response_id, self.scope)) > 0

    def set_status(self, response_id: str, status: str, *,
                   only_if_in: tuple[str, ...] | None = None) -> bool:
        """Atomically set the status (column and JSON), optionally only from given statuses."""
        with self._tx() as db:
            row = db.execute(SELECT_STATUS, (response_id, self.scope)).fetchone()
            if row is None or (only_if_in is not None and row[0] not in only_if_in):
                return False
            response = _loads(row[1])
            response["status"] = status
            db.execute(UPDATE_RESPONSE, (status, _dumps(response), response_id))
            return True

    def recover_interrupted(self) -> int:
        """Mark responses left queued/in_progress by a dead process as failed; how many.
        One with recorded events also gets a final response.failed event, so a replay ends."""
        with self._tx() as db:
            rows = db.execute(SELECT_INTERRUPTED).fetchall()
            for response_id, raw in rows:
                response = _loads(raw)
                response["status"] = "failed"
                response["error"] = dict(INTERRUPTED_ERROR)
                db.execute(UPDATE_RESPONSE, ("failed", _dumps(response), response_id))
                last = db.execute(SELECT_LAST_SEQUENCE, (response_id,)).fetchone()[0]
                if last is not None:
                    event = {"type": "response.failed", "sequence_number": last + 1,
                             "response": response}
                    db.execute(INSERT_EVENT, (response_id, last + 1, _dumps(event)))
        return len(rows)

    def append_events(self, response_id: str, events: list[dict]) -> None:
        """Several events in one transaction (a stream's worth at a time)."""
        if not events:
            return
        with self._tx() as db:
            db.executemany(INSERT_EVENT, [
                (response_id, event["sequence_number"], _dumps(event)) for event in events
            ])

    def events(self, response_id: str, *, starting_after: int | None = None) -> list[dict]:
        after = -1 if starting_after is None else starting_after
        return [_loads(r[0]) for r in self._all(SELECT_EVENTS, (response_id, self.scope, after))]

    def list_input_items(self, response_id: str, *, after: str | None = None, limit: int = 20,
                         order: str = "desc") -> tuple[list[dict], bool] | None:
        """A page of the response's input items, or None for an unknown response."""
        row = self._one(SELECT_INPUT_ITEMS, (response_id, self.scope))
        if row is None:
            return None
        return page(_loads(row[0]), after=after, limit=limit, order=order)

    def chain_items(self, response_id: str) -> list[dict] | None:
        """The context for a follow-up to `response_id`: from the root of its
        previous_response_id chain forward, each response's input items then its output.
        None when the response or any link of the chain is missing."""
        rows = self._all(SELECT_CHAIN, (response_id, self.scope, MAX_CHAIN_DEPTH))
        if not rows or rows[0][0] is not None:
            return None
        items: list[dict] = []
        for _, input_items, response in rows:
            items += _loads(input_items)
            items += _loads(response).get("output") or []
        return items

    # ---- conversations ----

    def create_conversation(self, *, items: list[dict] | None = None,
                            metadata: dict | None = None) -> dict:
        conversation = {"id": new_id("conv"), "object": "conversation",
                        "created_at": int(time.time()), "metadata": metadata or {}}
        with self._tx() as db:
            db.execute(INSERT_CONVERSATION, (
                conversation["id"], conversation["created_at"], _dumps(conversation["metadata"]), self.scope
            ))
            self._insert_items(db, conversation["id"], items or [])
        return conversation

    def get_conversation(self, conv_id: str) -> dict | None:
        row = self._one(SELECT_CONVERSATION, (conv_id, self.scope))
        if row is None:
            return None
        return {"id": row[0], "object": "conversation", "created_at": row[1],
                "metadata": _loads(row[2])}

    def update_conversation(self, conv_id: str, metadata: dict | None) -> dict | None:
        if self._write(UPDATE_CONVERSATION, (_dumps(metadata or {}), conv_id, self.scope)) == 0:
            return None
        return self.get_conversation(conv_id)

    def delete_conversation(self, conv_id: str) -> bool:
        return self._write(DELETE_CONVERSATION, (conv_id, self.scope)) > 0

    def _insert_items(self, db: sqlite3.Connection, conv_id: str,
                      items: list[dict]) -> list[dict]:
        stored = with_item_ids(items)
        position = db.execute(SELECT_NEXT_POSITION, (conv_id,)).fetchone()[0]
        now = int(time.time())
        db.executemany(INSERT_ITEM, [
            (conv_id, position + i, item["id"], _dumps(item), now)
            for i, item in enumerate(stored)
        ])
        return stored

    def add_items(self, conv_id: str, items: list[dict]) -> list[dict] | None:
        """Append items (ids assigned where missing); the stored items, or None if no such
        conversation."""
        with self._tx() as db:
            if db.execute(SELECT_CONVERSATION, (conv_id, self.scope)).fetchone() is None:
                return None
            return self._insert_items(db, conv_id, items)

    def list_items(self, conv_id: str, *, after: str | None = None, limit: int = 20,
                   order: str = "desc") -> tuple[list[dict], bool] | None:
        """A page of the conversation's items; None if no such conversation, no items after
        an unknown `after`."""
        _check_order(order)
        with self._lock:
            if self.get_conversation(conv_id) is None:
                return None
            start = -1 if order == "asc" else 1 << 62
            if after is not None:
                start = self._one(SELECT_ITEM_POSITION, (conv_id, after))[0]
                if start is None:
                    return [], False
            sql = SELECT_ITEMS_ASC if order == "asc" else SELECT_ITEMS_DESC
            rows = self._all(sql, (conv_id, start, limit + 1))
        return [_loads(r[0]) for r in rows[:limit]], len(rows) > limit

    def get_item(self, conv_id: str, item_id: str) -> dict | None:
        with self._lock:
            if self.get_conversation(conv_id) is None:
                return None
            row = self._one(SELECT_ITEM, (conv_id, item_id))
        return None if row is None else _loads(row[0])

    def delete_item(self, conv_id: str, item_id: str) -> bool:
        with self._lock:
            return self.get_conversation(conv_id) is not None and self._write(DELETE_ITEM, (conv_id, item_id)) > 0

    def conversation_items(self, conv_id: str) -> list[dict] | None:
        with self._lock:
            if self.get_conversation(conv_id) is None:
                return None
            return [_loads(r[0]) for r in self._all(SELECT_ALL_ITEMS, (conv_id,))]
