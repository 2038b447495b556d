"""Long prompt builds are bounded (issue 28, items 3, 4 and 7): Responses truncation over many
items, the cap on items, the cap on Anthropic context edits, and the thinking budget's limit."""

from __future__ import annotations

import pytest

from conftest import ServerProcess
from rawhttp import RawConnection, post_json, request
from localserve.dialects.limits import MAX_CONTEXT_EDITS, MAX_PROMPT_ITEMS

USER = [{"role": "user", "content": "hi"}]
STUBBORN_EDIT = {"type": "clear_tool_uses_20250919", "trigger": {"type": "tool_uses", "value": 0},
                 "keep": {"type": "tool_uses", "value": 0},
                 "clear_at_least": {"type": "input_tokens", "value": 10**9}}


@pytest.fixture(scope="module")
def srv(tiny_model, tmp_path_factory):
    server = ServerProcess(tiny_model, "--model-id", "tiny", "--ctx-size", "2048",
                           "--data-dir", str(tmp_path_factory.mktemp("long-prompts")))
    yield server
    server.stop()


def history(count: int) -> list[dict]:
    return [{"role": "user" if n % 2 == 0 else "assistant", "content": f"turn {n} " + "word " * 5}
            for n in range(count)] + [{"role": "user", "content": "last question"}]


def test_truncation_auto_keeps_the_newest_items_that_fit(srv):
    """truncation "auto" compacts first (test_compaction_responses); when not even a summary can be
    written (the oldest turn alone is past the context), it keeps the newest items that fit."""
    body = {"model": "tiny", "input": [{"role": "user", "content": "word " * 3000}, *history(600)],
            "max_output_tokens": 1}
    refused = request(srv.port, post_json("/v1/responses", body), timeout=60)
    assert refused.status == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
    resp = request(srv.port, post_json("/v1/responses", {**body, "truncation": "auto"}), timeout=60)
    assert resp.status == 200, resp.body
    assert [item["type"] for item in resp.json()["output"]] == ["message"]     # nothing compacted
    used = resp.json()["usage"]["input_tokens"]
    # the longest tail that fits: one more item (about 20 tokens) would not have fitted
    assert 2048 - 60 < used < 2048


def test_more_items_than_the_cap_is_400_naming_it(srv):
    body = {"model": "tiny", "input": history(MAX_PROMPT_ITEMS), "truncation": "auto", "max_output_tokens": 1}
    resp = request(srv.port, post_json("/v1/responses", body))
    error = resp.json()["error"]
    assert resp.status == 400 and error["code"] == "too_many_items" and error["param"] == "input"
    assert "MAX_PROMPT_ITEMS" in error["message"]


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
def test_more_context_edits_than_the_cap_is_400(srv, path):
    body = {"model": "tiny", "max_tokens": 2, "messages": USER,
            "context_management": {"edits": [STUBBORN_EDIT] * (MAX_CONTEXT_EDITS + 1)}}
    resp = request(srv.port, post_json(path, body))
    assert resp.status == 400 and resp.json()["error"]["type"] == "invalid_request_error"
    assert "MAX_CONTEXT_EDITS" in resp.json()["error"]["message"]
    ok = request(srv.port, post_json(path, {**body, "context_management": {"edits": [STUBBORN_EDIT] * MAX_CONTEXT_EDITS}}))
    assert ok.status == 200, ok.body


@pytest.mark.parametrize("budget,beta,status", [
    (2, None, 400), (3, None, 400), (1, None, 200),
    (31999, "interleaved-thinking-2025-05-14", 200),      # Claude Code's: the budget spans the turn
])
def test_a_thinking_budget_must_be_below_max_tokens(srv, budget, beta, status):
    body = {"model": "tiny", "max_tokens": 2, "messages": USER, "thinking": {"type": "enabled", "budget_tokens": budget}}
    resp = request(srv.port, post_json("/v1/messages", body, f"anthropic-beta: {beta}\r\n" if beta else ""))
    assert resp.status == status, resp.body
    if status == 400:
        error = resp.json()["error"]
        assert error["type"] == "invalid_request_error" and "thinking.budget_tokens" in error["message"]


def tool_history(uses: int, result: str) -> list[dict]:
    messages = [{"role": "user", "content": "go"}]
    for n in range(uses):
        messages.append({"role": "assistant", "content": [
            {"type": "tool_use", "id": f"toolu_{n}", "name": "get_time", "input": {"zone": "UTC"}}]})
        messages.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": result}]})
    return messages + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "and now?"}]


def test_a_client_that_leaves_stops_its_context_edits(srv):
    """count_tokens with the most edits, each weighing a prompt of about 2 MB (seconds of tokenizing
    in all): the client closes at once, and the server stops after the edit under way."""
    edits = [{**STUBBORN_EDIT, "keep": {"type": "tool_uses", "value": n}} for n in range(MAX_CONTEXT_EDITS)]
    body = {"model": "tiny", "messages": tool_history(40, "12:00 " * 8000),
            "tools": [{"name": "get_time", "input_schema": {"type": "object"}}],
            "context_management": {"edits": edits}}
    conn = RawConnection(srv.port)
    conn.send(post_json("/v1/messages/count_tokens", body))
    conn.close()
    assert srv.wait_log("the client left while its prompt was built; stopped", timeout=60), srv.log[-3000:]
