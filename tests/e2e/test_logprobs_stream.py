"""Streamed logprobs equal the whole answer's, token for token, in every OpenAI dialect.

A stream holds back text it cannot send yet (half a UTF-8 character, what may begin a stop
string or a tool call); the tokens of that text get their entries when it is released. Each
text is forced with a grammar on the tiny model, greedy, so both requests choose the same tokens.
"""

from __future__ import annotations

import pytest

from conftest import ServerProcess
from family_templates import write_family_gguf
from rawhttp import post_json, request
from sse import parse_sse

from localserve.grammar.grammar import tool_call_grammar

TIME = {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 4}}, "required": ["zone"]}}
CASES = {
    # the tiny vocabulary spells é, 世 and ✓ in byte tokens: each is half a character or less
    "multi-byte": dict(grammar='root ::= "h\u00e9llo \u4e16\u754c \u2713 ok"'),
    # "X" and "XY" may begin the stop string: held back, then released on the next token
    "stop prefix": dict(grammar='root ::= "aX bXY cX dXYZ never sent"', stop=["XYZ"]),
    # on a Hermes-style model "<" and "<t" may begin <tool_call>: held back, then released as
    # text; the call's own tokens are no text and have no entries, streamed or not
    "tool call": dict(grammar=tool_call_grammar("hermes", [TIME], parallel=False, forced_name="get_time",
                                                prefix="a < b <t "), tools=[TIME]),
}


@pytest.fixture(scope="module")
def hermes(models_dir):
    srv = ServerProcess(write_family_gguf(models_dir / "tiny-hermes-logprobs.gguf", "hermes"),
                        "--model-id", "hermes", "--no-store")
    yield srv
    srv.stop()


@pytest.fixture
def serve(request, server):
    """The server for a case: the tool call needs a model whose template has a tool-call syntax."""
    return lambda case: request.getfixturevalue("hermes") if "tools" in CASES[case] else server


def post(server, path: str, body: dict, stream: bool):
    resp = request(server.port, post_json(path, {**body, "stream": stream}))
    assert resp.status == 200, resp.body
    return parse_sse(resp.body) if stream else resp.json()


def chat_body(case: dict, **more) -> dict:
    body = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0, "max_tokens": 200,
            "grammar": case["grammar"], **more}
    if "stop" in case:
        body["stop"] = case["stop"]
    if "tools" in case:
        body["tools"] = [{"type": "function", "function": tool} for tool in case["tools"]]
    return body


# The second request finds its prompt in the cache: its first row is computed in a batch of another
# shape, and a logprob can differ in the third decimal. Tokens and their order are exact.
CLOSE = 1e-2


def assert_same_entries(streamed: list[dict], whole: list[dict]) -> None:
    assert [(e["token"], e["bytes"]) for e in streamed] == [(e["token"], e["bytes"]) for e in whole]
    assert [e["logprob"] for e in streamed] == pytest.approx([e["logprob"] for e in whole], abs=CLOSE)
    for got, want in zip(streamed, whole):
        assert [t["token"] for t in got["top_logprobs"]] == [t["token"] for t in want["top_logprobs"]]
        assert [t["logprob"] for t in got["top_logprobs"]] == pytest.approx(
            [t["logprob"] for t in want["top_logprobs"]], abs=CLOSE)


@pytest.mark.parametrize("case", CASES)
def test_chat_streamed_logprobs_equal_the_whole_answers(serve, case):
    server = serve(case)
    body = chat_body(CASES[case], logprobs=True, top_logprobs=2)
    whole = post(server, "/v1/chat/completions", body, stream=False)["choices"][0]
    streamed = []
    for _, chunk in post(server, "/v1/chat/completions", body, stream=True):
        if chunk.get("choices") and chunk["choices"][0]["logprobs"]:
            streamed += chunk["choices"][0]["logprobs"]["content"]
    spelled = b"".join(bytes(e["bytes"]) for e in whole["logprobs"]["content"])
    assert spelled.startswith((whole["message"]["content"] or "").encode())
    assert len(whole["logprobs"]["content"]) > 4
    if "tools" in CASES[case]:
        assert whole["finish_reason"] == "tool_calls" and whole["message"]["content"].startswith("a < b <t")
    assert_same_entries(streamed, whole["logprobs"]["content"])


@pytest.mark.parametrize("case", ["multi-byte", "stop prefix"])
def test_completions_streamed_logprobs_equal_the_whole_answers(server, case):
    body = {"prompt": "hi", "temperature": 0, "max_tokens": 200, "logprobs": 2, "grammar": CASES[case]["grammar"],
            "stop": CASES[case].get("stop", [])}
    whole = post(server, "/v1/completions", body, stream=False)["choices"][0]["logprobs"]
    streamed = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for _, chunk in post(server, "/v1/completions", body, stream=True):
        if chunk.get("choices") and chunk["choices"][0]["logprobs"]:
            for key in streamed:
                streamed[key] += chunk["choices"][0]["logprobs"][key]
    assert len(whole["tokens"]) > 4
    assert streamed["tokens"] == whole["tokens"] and streamed["text_offset"] == whole["text_offset"]
    assert streamed["token_logprobs"] == pytest.approx(whole["token_logprobs"], abs=CLOSE)
    assert [sorted(t) for t in streamed["top_logprobs"]] == [sorted(t) for t in whole["top_logprobs"]]


@pytest.mark.parametrize("case", CASES)
def test_responses_streamed_logprobs_equal_the_whole_answers(serve, case):
    server = serve(case)
    body = {"input": "hi", "temperature": 0, "max_output_tokens": 200, "top_logprobs": 2,
            "include": ["message.output_text.logprobs"], "grammar": CASES[case]["grammar"]}
    if "stop" in CASES[case]:
        body["stop"] = CASES[case]["stop"]
    if "tools" in CASES[case]:
        body["tools"] = [{"type": "function", **tool} for tool in CASES[case]["tools"]]
    whole = post(server, "/v1/responses", body, stream=False)
    [message] = [item for item in whole["output"] if item["type"] == "message"]
    events = [data for _, data in post(server, "/v1/responses", body, stream=True)]
    streamed = [e for event in events if event["type"] == "response.output_text.delta" for e in event["logprobs"]]
    [done] = [event for event in events if event["type"] == "response.output_text.done"]
    assert len(message["content"][0]["logprobs"]) > 4
    assert_same_entries(streamed, message["content"][0]["logprobs"])
    assert_same_entries(done["logprobs"], message["content"][0]["logprobs"])
