"""A newer completion supersedes the older one still running only for the same client
(dialects/fim.py): the same X-Client-Id, never the same User-Agent alone; the superseded answer
says so in its dialect's cancelled shape; a warm-up takes no part; and the registration follows
the newest keystroke, however many come.

One slot, so an older completion still running is what a newer one waits behind unless it
supersedes it: the order is read from the streams and the answers, never from the clock."""

from __future__ import annotations

import json
import time

import pytest

from conftest import ServerProcess
from rawhttp import RawConnection, RawResponse, post_json, request
from sse import sse_data
from tinymodel import CHATML_TEMPLATE, write_tiny_gguf

LONG = 1500         # a forced middle this long is still being written when the next request comes


@pytest.fixture(scope="module")
def one_slot(tmp_path_factory):
    path = write_tiny_gguf(tmp_path_factory.mktemp("supersede-model") / "coder.gguf",
                           chat_template=CHATML_TEMPLATE, fim="repo")
    srv = ServerProcess(path, "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def forced(text: str) -> str:
    return "root ::= " + json.dumps(text)


def long_middle(char: str, stream: bool = True) -> dict:
    return {"input_prefix": "", "input_suffix": "", "stream": stream, "grammar": forced(char * LONG),
            "n_predict": LONG + 8}      # room for the end after the forced text


def headers(client_id: str | None = None, agent: str = "editor-test/1") -> str:
    return f"User-Agent: {agent}\r\n" + (f"X-Client-Id: {client_id}\r\n" if client_id else "")


def started(port: int, body: dict, head: str, path: str = "/infill") -> RawConnection:
    """A streamed completion sent on a connection of its own, once it is writing its middle."""
    conn = RawConnection(port, timeout=60)
    conn.send(post_json(path, body, head))
    conn.wait_for(b"data: ")
    return conn


def quick(port: int, head: str, text: str = "ok") -> RawResponse:
    return request(port, post_json("/infill", {"input_prefix": "", "input_suffix": "", "grammar": forced(text)},
                                   head), timeout=60)


def generating(port: int) -> None:
    """/slots polled until the slot's job has written a token (a wait, not a timed assertion)."""
    for _ in range(600):
        state = request(port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()
        if any((slot["job"] or {}).get("generated_tokens", 0) > 0 for slot in state["slots"]):
            return
        time.sleep(0.05)
    raise AssertionError(f"no job started generating: {state}")


def test_the_same_user_agent_on_two_connections_is_not_the_same_client(one_slot):
    """Two vims (curl, one User-Agent), no X-Client-Id: the second waits, the first runs to its end."""
    older = started(one_slot.port, long_middle("a"), headers(agent="curl/8.5.0"))
    try:
        newer = quick(one_slot.port, headers(agent="curl/8.5.0"))
        assert newer.status == 200 and newer.json()["content"] == "ok"
        events = sse_data(older.read_response().body)
    finally:
        older.close()
    assert events[-1]["stop_type"] == "eos"
    assert "".join(e["content"] for e in events[:-1]) == "a" * LONG


def test_a_superseded_whole_answer_says_so_with_the_text_it_wrote(one_slot):
    port = one_slot.port
    older = RawConnection(port, timeout=60)
    try:
        older.send(post_json("/infill", long_middle("b", stream=False), headers("window-1")))
        generating(port)
        newer = quick(port, headers("window-1", agent="another/2"))
        answer = older.read_response().json()
    finally:
        older.close()
    assert newer.json()["content"] == "ok"
    assert answer["stop_type"] == "none" and answer["stopping_word"] == ""
    # its text so far, as many tokens as it counts: not an empty answer claiming hundreds of tokens
    assert answer["content"] and answer["content"] == "b" * len(answer["content"])
    assert 0 < answer["tokens_predicted"] < LONG and len(answer["content"]) <= answer["tokens_predicted"]


def test_a_superseded_completions_stream_ends_cancelled(one_slot):
    body = {"prompt": "def f():\n    ", "suffix": "\n", "max_tokens": LONG, "grammar": forced("c" * LONG),
            "stream": True}
    older = started(one_slot.port, body, headers("window-2"), path="/v1/completions")
    try:
        newer = request(one_slot.port, post_json("/v1/completions", {**body, "stream": False, "grammar": forced("ok")},
                                                 headers("window-2")), timeout=60)
        stream = older.read_response().body
    finally:
        older.close()
    assert newer.json()["choices"][0]["finish_reason"] == "stop"
    chunks = sse_data(stream)
    assert chunks[-1]["choices"][0]["finish_reason"] == "cancelled"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert stream.rstrip().endswith(b"data: [DONE]")


def test_a_warm_up_does_not_cancel_its_editors_running_completion(one_slot):
    """llama.vim sends n_predict 0 with new context while a completion may still run: the
    completion goes on to its end, and the warm-up waits its turn."""
    older = started(one_slot.port, long_middle("d"), headers("window-3"))
    try:
        warm = request(one_slot.port, post_json("/infill", {"input_prefix": "x", "input_suffix": "y", "n_predict": 0},
                                                headers("window-3")), timeout=60)
        events = sse_data(older.read_response().body)
    finally:
        older.close()
    assert warm.status == 200 and warm.json()["tokens_predicted"] == 0
    assert events[-1]["stop_type"] == "eos"
    assert "".join(e["content"] for e in events[:-1]) == "d" * LONG


def test_the_third_keystroke_cancels_the_second(one_slot):
    """After the first supersede, the first completion's end leaves the second's registration:
    the third keystroke still cancels the second (else it would wait behind all of it)."""
    port = one_slot.port
    first = started(port, long_middle("e"), headers("window-4"))
    try:
        second = started(port, long_middle("f"), headers("window-4"))
        try:
            assert sse_data(first.read_response().body)[-1]["stop_type"] == "none"
            first.send(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert first.read_response().status == 200      # the first request's handler is all done
            third = quick(port, headers("window-4"))
            assert third.json()["content"] == "ok"
            events = sse_data(second.read_response().body)
        finally:
            second.close()
    finally:
        first.close()
    assert events[-1]["stop_type"] == "none"
    assert len("".join(e["content"] for e in events[:-1])) < LONG
