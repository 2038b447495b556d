"""localserve.store.store on real SQLite files: round trips, migrations, crash recovery, threads."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from localserve.store.store import INTERRUPTED_ERROR, MIGRATIONS, Store, page

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def db_path(tmp_path):
    return str(tmp_path / "data" / "nested" / "localserve.db")


@pytest.fixture
def store(db_path):
    s = Store(db_path)
    yield s
    s.close()


def response(rid, status="completed", *, prev=None, output=None, **extra):
    return {"id": rid, "object": "response", "created_at": 1700000000, "status": status,
            "model": "tiny", "output": output or [], "usage": None, "error": None,
            "incomplete_details": None, "metadata": {}, "previous_response_id": prev,
            "background": False, "store": True, **extra}


def user(text, **extra):
    return {"type": "message", "role": "user", "content": text, **extra}


def assistant(text, item_id):
    return {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}


def raw(path, sql, args=()):
    with sqlite3.connect(path) as db:
        return db.execute(sql, args).fetchall()


def run_child(db_path, body):
    """Start a Python child that opens a Store on db_path as `store` and runs body."""
    code = "from localserve.store.store import Store\nstore = Store(%r)\n" % db_path
    code += textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


# ---- opening, migrations ----

def test_open_creates_parent_dirs_and_sets_pragmas(store, db_path):
    assert os.path.exists(db_path)
    with store._lock:
        assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._db.execute("PRAGMA foreign_keys").fetchone()[0] == 1
        assert store._db.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert raw(db_path, "PRAGMA user_version")[0][0] == len(MIGRATIONS)


def test_reopen_is_idempotent_and_keeps_data(db_path):
    with Store(db_path) as s:
        s.create_response(response("resp_1"), input_items=[user("hi")], request={})
        conv = s.create_conversation(items=[user("a")], metadata={"k": "v"})
    for _ in range(3):
        with Store(db_path) as s:
            assert raw(db_path, "PRAGMA user_version")[0][0] == len(MIGRATIONS)
            assert s.get_response("resp_1")["status"] == "completed"
            assert s.get_conversation(conv["id"])["metadata"] == {"k": "v"}
    assert raw(db_path, "PRAGMA user_version")[0][0] == len(MIGRATIONS)
    tables = {r[0] for r in raw(db_path, "SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"responses", "response_events", "conversations", "conversation_items"} <= tables


def test_closed_store_refuses_work(db_path):
    s = Store(db_path)
    s.close()
    with pytest.raises(sqlite3.ProgrammingError):
        s.get_response("resp_x")


# ---- responses ----

def test_response_round_trip_and_item_ids(store):
    items = [user("hello"), {"role": "user", "content": "no type"},
             {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
             {"type": "function_call_output", "call_id": "c1", "output": "42"},
             {"type": "reasoning", "summary": []}, user("kept", id="msg_given")]
    out = [{"type": "message", "role": "assistant", "content": []}]
    request = {"model": "tiny", "instructions": "be brief", "store": True}
    stored = store.create_response(response("resp_a", output=out), input_items=items,
                                   request=request)
    prefixes = [i["id"].split("_")[0] for i in stored]
    assert prefixes == ["msg", "msg", "fc", "fco", "rs", "msg"]
    assert stored[-1]["id"] == "msg_given"
    assert "id" not in items[0] and "id" not in out[0]  # callers' dicts are not mutated
    assert stored[0]["content"] == "hello"  # string content stored as given

    got = store.get_response("resp_a")
    assert got["model"] == "tiny" and got["status"] == "completed"
    assert got["output"][0]["id"].startswith("msg_")
    assert store.list_input_items("resp_a", order="asc", limit=100)[0] == stored
    assert store.get_response("resp_missing") is None
    assert store.list_input_items("resp_missing") is None


def test_update_response_replaces_object(store):
    store.create_response(response("resp_u", "in_progress"), input_items=[], request={})
    done = response("resp_u", "completed", output=[assistant("hi", "msg_1")],
                    usage={"input_tokens": 3, "output_tokens": 1, "total_tokens": 4})
    assert store.update_response(done)
    assert store.get_response("resp_u") == done
    assert raw(store.path, "SELECT status FROM responses WHERE id='resp_u'")[0][0] == "completed"
    assert not store.update_response(response("resp_nope"))


def test_update_response_conditional_does_not_overwrite_cancel(store):
    store.create_response(response("resp_c", "in_progress"), input_items=[], request={})
    assert store.set_status("resp_c", "cancelled", only_if_in=("queued", "in_progress"))
    late = response("resp_c", "completed")
    assert not store.update_response(late, only_if_in=("queued", "in_progress"))
    assert store.get_response("resp_c")["status"] == "cancelled"


def test_set_status_conditional_semantics(store):
    store.create_response(response("resp_s", "queued", background=True), input_items=[],
                          request={})
    active = ("queued", "in_progress")
    assert store.set_status("resp_s", "in_progress")
    assert store.get_response("resp_s")["status"] == "in_progress"
    assert store.set_status("resp_s", "cancelled", only_if_in=active)
    assert store.get_response("resp_s")["status"] == "cancelled"
    assert not store.set_status("resp_s", "cancelled", only_if_in=active)
    assert not store.set_status("resp_s", "completed", only_if_in=active)
    assert store.get_response("resp_s")["status"] == "cancelled"
    assert not store.set_status("resp_missing", "cancelled")


def test_delete_response_cascades_events(store):
    store.create_response(response("resp_d"), input_items=[user("x")], request={})
    for n in range(3):
        store.append_events("resp_d", [{"type": "response.output_text.delta", "sequence_number": n}])
    assert store.delete_response("resp_d")
    assert not store.delete_response("resp_d")
    assert store.get_response("resp_d") is None
    assert store.events("resp_d") == []
    assert raw(store.path, "SELECT count(*) FROM response_events")[0][0] == 0


def test_events_replay_and_starting_after(store):
    store.create_response(response("resp_e", "in_progress"), input_items=[], request={})
    events = [{"type": "response.created", "sequence_number": 0, "response": {"id": "resp_e"}},
              {"type": "response.in_progress", "sequence_number": 1},
              {"type": "response.output_text.delta", "sequence_number": 2, "delta": "hé",
               "logprobs": []}]
    for e in events:
        store.append_events("resp_e", [e])
    assert store.events("resp_e") == events
    assert store.events("resp_e", starting_after=0) == events[1:]
    assert store.events("resp_e", starting_after=2) == []
    with pytest.raises(sqlite3.IntegrityError):
        store.append_events("resp_e", [{"type": "x", "sequence_number": 1}])
    with pytest.raises(sqlite3.IntegrityError):  # events need their response
        store.append_events("resp_missing", [{"type": "x", "sequence_number": 0}])


def test_list_input_items_paging(store):
    items = [user(f"m{i}", id=f"msg_{i}") for i in range(5)]
    store.create_response(response("resp_p"), input_items=items, request={})

    def ids(result):
        got, more = result
        return [i["id"] for i in got], more

    assert ids(store.list_input_items("resp_p", after=None, limit=2, order="asc")) == (
        ["msg_0", "msg_1"], True)
    assert ids(store.list_input_items("resp_p", after="msg_1", limit=2, order="asc")) == (
        ["msg_2", "msg_3"], True)
    assert ids(store.list_input_items("resp_p", after="msg_3", limit=2, order="asc")) == (
        ["msg_4"], False)
    assert ids(store.list_input_items("resp_p", after=None, limit=3, order="desc")) == (
        ["msg_4", "msg_3", "msg_2"], True)
    assert ids(store.list_input_items("resp_p", after="msg_2", limit=5, order="desc")) == (
        ["msg_1", "msg_0"], False)
    assert ids(store.list_input_items("resp_p", after=None, limit=5, order="asc")) == (
        [f"msg_{i}" for i in range(5)], False)
    assert store.list_input_items("resp_p", after="msg_nope", limit=5, order="asc") == (
        [], False)
    assert store.list_input_items("resp_missing", after=None, limit=5, order="asc") is None
    with pytest.raises(ValueError):
        store.list_input_items("resp_p", after=None, limit=5, order="sideways")


def test_page_helper_edges():
    items = [{"id": str(i)} for i in range(3)]
    assert page(items, after=None, limit=3, order="asc") == (items, False)
    assert page([], after=None, limit=3, order="desc") == ([], False)
    assert page(items, after="2", limit=3, order="asc") == ([], False)


def test_chain_items_over_three_responses(store):
    store.create_response(response("resp_1", output=[assistant("a1", "msg_a1")]),
                          input_items=[user("q1", id="msg_q1")], request={})
    store.create_response(response("resp_2", prev="resp_1", output=[assistant("a2", "msg_a2")]),
                          input_items=[user("q2", id="msg_q2")], request={})
    store.create_response(response("resp_3", prev="resp_2", output=[assistant("a3", "msg_a3")]),
                          input_items=[user("q3", id="msg_q3")], request={})
    chain = store.chain_items("resp_3")
    assert [i["id"] for i in chain] == ["msg_q1", "msg_a1", "msg_q2", "msg_a2", "msg_q3",
                                        "msg_a3"]
    assert [i["id"] for i in store.chain_items("resp_1")] == ["msg_q1", "msg_a1"]
    assert store.chain_items("resp_missing") is None
    store.delete_response("resp_1")  # a broken link anywhere means no context
    assert store.chain_items("resp_3") is None


def test_response_columns_record_chain_and_conversation(store):
    store.create_response(response("resp_col", "queued", background=True,
                                   conversation={"id": "conv_1"}),
                          input_items=[], request={"store": True})
    row = raw(store.path, "SELECT status, model, conversation_id, background, store "
                          "FROM responses WHERE id='resp_col'")[0]
    assert row == ("queued", "tiny", "conv_1", 1, 1)


# ---- conversations ----

def test_conversation_round_trip(store):
    conv = store.create_conversation(items=[user("hi")], metadata={"topic": "x"})
    assert conv["id"].startswith("conv_") and conv["object"] == "conversation"
    assert isinstance(conv["created_at"], int) and conv["metadata"] == {"topic": "x"}
    assert store.get_conversation(conv["id"]) == conv
    updated = store.update_conversation(conv["id"], {"topic": "y"})
    assert updated == {**conv, "metadata": {"topic": "y"}}
    assert store.update_conversation("conv_missing", {}) is None
    assert store.get_conversation("conv_missing") is None
    empty = store.create_conversation(items=[], metadata=None)
    assert empty["metadata"] == {} and store.conversation_items(empty["id"]) == []


def test_conversation_items(store):
    conv = store.create_conversation(items=[user("first")], metadata=None)
    added = store.add_items(conv["id"], [
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
        assistant("done", "msg_done")])
    assert [a["id"][:3] for a in added] == ["fc_", "fco", "msg"]
    everything = store.conversation_items(conv["id"])
    assert [i.get("content") for i in everything[:1]] == ["first"]
    assert everything[1:] == added
    assert store.get_item(conv["id"], "msg_done") == added[2]
    assert store.get_item(conv["id"], "msg_nope") is None
    assert store.get_item("conv_missing", "msg_done") is None
    assert store.delete_item(conv["id"], "msg_done")
    assert not store.delete_item(conv["id"], "msg_done")
    assert len(store.conversation_items(conv["id"])) == 3
    assert store.add_items("conv_missing", [user("x")]) is None
    assert store.conversation_items("conv_missing") is None


def test_conversation_items_paging(store):
    conv = store.create_conversation(items=[user(f"m{i}", id=f"msg_{i}") for i in range(5)],
                                     metadata=None)
    cid = conv["id"]

    def ids(result):
        got, more = result
        return [i["id"] for i in got], more

    assert ids(store.list_items(cid, after=None, limit=2, order="asc")) == (
        ["msg_0", "msg_1"], True)
    assert ids(store.list_items(cid, after="msg_1", limit=3, order="asc")) == (
        ["msg_2", "msg_3", "msg_4"], False)
    assert ids(store.list_items(cid, after=None, limit=2, order="desc")) == (
        ["msg_4", "msg_3"], True)
    assert ids(store.list_items(cid, after="msg_3", limit=2, order="desc")) == (
        ["msg_2", "msg_1"], True)
    assert ids(store.list_items(cid, after="msg_1", limit=2, order="desc")) == (
        ["msg_0"], False)
    assert store.list_items(cid, after="msg_nope", limit=2, order="asc") == ([], False)
    assert store.list_items("conv_missing", after=None, limit=2, order="asc") is None
    store.add_items(cid, [user("m5", id="msg_5")])  # appended after existing positions
    assert ids(store.list_items(cid, after="msg_4", limit=5, order="asc")) == (["msg_5"], False)
    with pytest.raises(ValueError):
        store.list_items(cid, after=None, limit=2, order="up")


def test_delete_conversation_cascades_items(store):
    conv = store.create_conversation(items=[user("a"), user("b")], metadata=None)
    other = store.create_conversation(items=[user("c")], metadata=None)
    assert store.delete_conversation(conv["id"])
    assert not store.delete_conversation(conv["id"])
    assert store.get_conversation(conv["id"]) is None
    assert store.list_items(conv["id"], after=None, limit=10, order="asc") is None
    counts = raw(store.path, "SELECT conversation_id, count(*) FROM conversation_items "
                             "GROUP BY conversation_id")
    assert counts == [(other["id"], 1)]


# ---- crashes and concurrency ----

def test_recover_interrupted_after_sigkill(db_path):
    child = run_child(db_path, """
        import os, signal
        def r(rid, status):
            return {"id": rid, "object": "response", "status": status, "created_at": 1,
                    "output": [], "error": None}
        store.create_response(r("resp_run", "in_progress"), input_items=[], request={})
        store.create_response(r("resp_wait", "queued"), input_items=[], request={})
        store.create_response(r("resp_done", "completed"), input_items=[], request={})
        store.append_events("resp_run", [{"type": "response.created", "sequence_number": 0}])
        store.append_events("resp_run", [{"type": "response.in_progress", "sequence_number": 1}])
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    with Store(db_path) as s:
        assert s.recovered == 2
        for rid in ("resp_run", "resp_wait"):
            got = s.get_response(rid)
            assert got["status"] == "failed" and got["error"] == INTERRUPTED_ERROR
        assert s.get_response("resp_done")["status"] == "completed"
        replay = s.events("resp_run")
        assert [e["type"] for e in replay] == [
            "response.created", "response.in_progress", "response.failed"]
        assert replay[-1]["sequence_number"] == 2
        assert replay[-1]["response"]["status"] == "failed"
        assert s.events("resp_wait") == []
        assert s.recover_interrupted() == 0
    with Store(db_path) as s:
        assert s.recovered == 0


def test_recover_interrupted_without_cleanup(db_path):
    s = Store(db_path)
    s.create_response(response("resp_x", "in_progress"), input_items=[], request={})
    # no close(): a second opening finds the row as a crash would leave it
    again = Store(db_path)
    assert again.recovered == 1
    assert s.get_response("resp_x")["status"] == "failed"
    again.close()
    s.close()


def test_survives_sigkill_of_a_writer_mid_writes(db_path):
    Store(db_path).close()
    child = run_child(db_path, """
        import sys
        conv = store.create_conversation(items=[], metadata=None)
        print(conv["id"], flush=True)
        n = 0
        while True:
            rid = "resp_%d" % n
            store.create_response({"id": rid, "status": "in_progress", "output": []},
                                  input_items=[{"type": "message", "role": "user",
                                                "content": "x" * 500}], request={"n": n})
            for seq in range(5):
                store.append_events(rid, [{"type": "delta", "sequence_number": seq}])
            store.update_response({"id": rid, "status": "completed", "output": [
                {"type": "message", "id": "msg_%d" % n, "role": "assistant", "content": []}]})
            store.add_items(conv["id"], [{"type": "message", "role": "user", "content": rid}])
            print(rid, flush=True)
            n += 1
    """)
    conv_id = child.stdout.readline().strip()
    done = [child.stdout.readline().strip() for _ in range(150)]
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL and done[-1] == "resp_149"

    assert raw(db_path, "PRAGMA integrity_check") == [("ok",)]
    with Store(db_path) as s:
        assert s.recovered <= 1  # at most the one being written when killed
        for rid in done:
            got = s.get_response(rid)
            assert got["status"] == "completed" and got["output"][0]["id"].startswith("msg_")
            assert len(s.events(rid)) == 5
        contents = [i["content"] for i in s.conversation_items(conv_id)]
        assert contents[:150] == done
        s.create_response(response("resp_after"), input_items=[], request={})
        assert s.get_response("resp_after") is not None


def test_concurrent_writers_from_eight_threads(store):
    conv = store.create_conversation(items=[], metadata=None)
    errors = []

    def work(t):
        try:
            for n in range(40):
                rid = f"resp_{t}_{n}"
                store.create_response(response(rid, "in_progress"),
                                      input_items=[user(rid)], request={})
                store.append_events(rid, [{"type": "response.created", "sequence_number": 0}])
                store.add_items(conv["id"], [user(rid)])
                assert store.set_status(rid, "completed", only_if_in=("in_progress",))
                store.get_response(rid)
                store.list_items(conv["id"], after=None, limit=5, order="desc")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert raw(store.path, "SELECT count(*) FROM responses WHERE status='completed'")[0][0] == 320
    assert raw(store.path, "SELECT count(*) FROM response_events")[0][0] == 320
    positions = raw(store.path, "SELECT position FROM conversation_items "
                                "WHERE conversation_id=? ORDER BY position", (conv["id"],))
    assert [p[0] for p in positions] == list(range(320))
    assert len({i["content"] for i in store.conversation_items(conv["id"])}) == 320


def test_two_stores_on_one_file(db_path):
    with Store(db_path) as a, Store(db_path) as b:
        a.create_response(response("resp_ab"), input_items=[], request={})
        assert b.get_response("resp_ab")["id"] == "resp_ab"
        conv = b.create_conversation(items=[user("x")], metadata=None)
        assert a.conversation_items(conv["id"])[0]["content"] == "x"


# ---- scopes: each API key's responses and conversations (issue 44) ----

def test_a_response_is_found_in_its_own_scope_only(store):
    mine, theirs = store.scoped("k1"), store.scoped("k2")
    mine.create_response(response("resp_1", "in_progress"), input_items=[user("secret")], request={})
    mine.append_events("resp_1", [{"type": "response.created", "sequence_number": 0}])
    assert mine.get_response("resp_1")["id"] == "resp_1"
    assert theirs.get_response("resp_1") is None and store.get_response("resp_1") is None
    assert theirs.list_input_items("resp_1") is None
    assert theirs.events("resp_1") == [] and len(mine.events("resp_1")) == 1
    assert theirs.chain_items("resp_1") is None
    assert not theirs.set_status("resp_1", "cancelled")
    assert not theirs.update_response(response("resp_1", "completed"))
    assert not theirs.delete_response("resp_1")
    assert mine.get_response("resp_1")["status"] == "in_progress"


def test_a_chain_through_another_scopes_response_is_broken(store):
    store.scoped("k1").create_response(response("resp_1"), input_items=[user("q1")], request={})
    store.scoped("k2").create_response(response("resp_2", prev="resp_1"), input_items=[user("q2")], request={})
    assert store.scoped("k2").chain_items("resp_2") is None


def test_a_conversation_is_found_in_its_own_scope_only(store):
    mine, theirs = store.scoped("k1"), store.scoped("k2")
    conv = mine.create_conversation(items=[user("secret", id="msg_1")])
    assert theirs.get_conversation(conv["id"]) is None
    assert theirs.conversation_items(conv["id"]) is None
    assert theirs.list_items(conv["id"]) is None
    assert theirs.get_item(conv["id"], "msg_1") is None
    assert theirs.add_items(conv["id"], [user("mine now")]) is None
    assert theirs.update_conversation(conv["id"], {"x": "y"}) is None
    assert not theirs.delete_item(conv["id"], "msg_1")
    assert not theirs.delete_conversation(conv["id"])
    assert [i["id"] for i in mine.conversation_items(conv["id"])] == ["msg_1"]
    assert mine.get_item(conv["id"], "msg_1")["content"] == "secret"


def test_rows_from_before_scopes_belong_to_the_single_key_scope(db_path):
    """A store written by a version without scopes: its rows are the one scope's ("")."""
    os.makedirs(os.path.dirname(db_path), exist_ok=True)
    with sqlite3.connect(db_path) as db:
        for statement in MIGRATIONS[0]:
            db.execute(statement)
        db.execute("PRAGMA user_version = 1")
        db.execute("INSERT INTO responses (id, created_at, status, request, input_items, response) "
                   "VALUES ('resp_old', 1, 'completed', '{}', '[]', '{\"id\": \"resp_old\"}')")
    with Store(db_path) as s:
        assert raw(db_path, "PRAGMA user_version")[0][0] == len(MIGRATIONS)
        assert s.get_response("resp_old") == {"id": "resp_old"}
        assert s.scoped("k1").get_response("resp_old") is None
