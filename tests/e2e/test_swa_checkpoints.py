"""Context checkpoints on a tiny sliding-window model (runtime/swa_checkpoints.py): a prompt cut
behind the window the engine keeps is served from a checkpoint, and its greedy answer is the one
the same prompt gets computed from scratch.

The model (tinymodel.sliding_window) has a 16-token window on layer 0; with --batch-size 32 llama.cpp
keeps 256 cells for it, so a sequence of 300 tokens no longer holds its first 40 positions'
window. Prompts are token ids, so each count below is exact."""

from __future__ import annotations

import pytest

from conftest import ServerProcess
from rawhttp import post_json, request
from tinymodel import NO_EOG, sliding_window, write_tiny_gguf

HEAD = [275 + (i * 7) % 90 for i in range(40)]         # printable characters' tokens
SUFFIX = [275 + (i * 11) % 90 for i in range(300)]


@pytest.fixture(scope="module")
def swa_server(tmp_path_factory):
    model = write_tiny_gguf(tmp_path_factory.mktemp("swa") / "tiny-gemma3.gguf", context_length=4096,
                            **sliding_window(16))
    srv = ServerProcess(str(model), "--slots", "1", "--batch-size", "32", "--cache-ram", "0",
                        "--ctx-size", "1024", "--speculative", "off", "--no-store")
    yield srv
    srv.stop()


def complete(server, prompt: list[int], max_tokens: int = 12) -> dict:
    resp = request(server.port, post_json("/v1/completions", {
        "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logit_bias": NO_EOG}), timeout=60)
    assert resp.status == 200, resp.body
    return resp.json()


def cached(answer: dict) -> int:
    return answer["usage"]["prompt_tokens_details"]["cached_tokens"]


def scratch(server, prompt: list[int]) -> dict:
    """The prompt computed from nothing: the slot first holds a prompt that shares no token with it."""
    complete(server, [prompt[0] + 1], max_tokens=1)
    answer = complete(server, prompt)
    assert cached(answer) == 0
    return answer


def test_an_edit_behind_the_window_is_served_from_the_checkpoint_where_the_last_one_cut(swa_server):
    complete(swa_server, HEAD + [300], max_tokens=1)
    first = complete(swa_server, HEAD + [301, 302] + SUFFIX)
    assert cached(first) == 40          # cut at the head's end: a checkpoint is taken there
    # the next keystroke cuts there again, 300 tokens behind the sequence's end: far behind the window
    edited = HEAD + [303, 304] + SUFFIX
    answer = complete(swa_server, edited)
    assert cached(answer) == 40 and answer["usage"]["prompt_tokens"] == len(edited)
    assert answer["choices"][0]["text"] == scratch(swa_server, edited)["choices"][0]["text"]


def test_a_chat_whose_answer_is_rendered_otherwise_resumes_at_its_prompts_end(swa_server):
    prompt = SUFFIX[:60]
    complete(swa_server, prompt, max_tokens=260)        # the answer pushes the window far past the prompt
    follow_up = prompt + [276, 277, 278] + SUFFIX[100:140]     # the answer, rendered as other tokens
    answer = complete(swa_server, follow_up)
    assert cached(answer) == 60
    assert answer["choices"][0]["text"] == scratch(swa_server, follow_up)["choices"][0]["text"]


def test_slots_reports_the_checkpoints(swa_server):
    resp = request(swa_server.port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n")
    (state,) = resp.json()["models"].values()
    checkpoints = state["swa_checkpoints"]
    assert checkpoints["count"] >= 1 and checkpoints["restored"] >= 2 and 0 < checkpoints["bytes"] <= checkpoints["limit_bytes"]
