"""Anthropic's server-side compaction (compact_20260112) on a scripted model, through the official
SDK in strict mode: the compaction block first in the answer and in the stream, pause_after_compaction
(stop_reason "compaction"), usage.iterations, the block sent back (everything before it left out, the
prompt shorter and holding the summary), a trigger crossed once compacts once, count_tokens, and the
400s for bad edits and blocks.

The scripted model (tests/support/scripted_model.py) writes SUMMARY when asked for a compaction's
summary, ANSWER when a user (or the summary's user turn) has just spoken.
"""

from __future__ import annotations

import re

import anthropic
import pytest

from clients import anthropic_sdk
from conftest import ServerProcess
from rawhttp import post_json, request
from scripted_model import write_scripted_gguf
from sse import parse_sse
from test_anthropic import check_wire, prompt_tokens

from localserve.dialects.anthropic.compaction import min_trigger

CONTEXT = 2048
SUMMARY = "The user asked about the weather in three cities; all three answers are given."
ANSWER = "Anything else about the weather?"
BETA = "compact-2026-01-12"
LONG = "Tell me about the weather in Paris, in Rome and in Vienna today, with the winds. " * 12
TRIGGER = {"type": "input_tokens", "value": min_trigger(CONTEXT)}
GET_METRICS = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"


@pytest.fixture(scope="module")
def server(models_dir, tmp_path_factory):
    path = write_scripted_gguf(models_dir / "scripted-compaction.gguf", [[ANSWER]], summary=[SUMMARY])
    srv = ServerProcess(path, "--model-id", "scripted", "--ctx-size", str(CONTEXT),
                        "--data-dir", str(tmp_path_factory.mktemp("compaction-data")))
    yield srv
    srv.stop()


def history() -> list[dict]:
    """A conversation past the lowest trigger (a quarter of the context)."""
    return [{"role": "user", "content": LONG},
            {"role": "assistant", "content": "Sunny in Paris, windy in Rome, rain in Vienna."},
            {"role": "user", "content": "And tomorrow?"}]


def compact_edit(**fields) -> dict:
    return {"edits": [{"type": "compact_20260112", "trigger": TRIGGER, **fields}]}


def compactions(srv) -> int:
    body = request(srv.port, GET_METRICS).body.decode()
    return int(float(re.search(r"^localserve_compactions_total (\S+)$", body, re.M).group(1)))


def create(client: anthropic.Anthropic, stream: bool, **kwargs):
    if not stream:
        return client.beta.messages.create(betas=[BETA], **kwargs)
    with client.beta.messages.stream(betas=[BETA], **kwargs) as s:
        return s.get_final_message()


@pytest.mark.parametrize("stream", [False, True])
def test_a_crossed_trigger_compacts_once_then_answers_from_the_summary(server, stream):
    client = anthropic_sdk(server)
    messages = history()
    whole = client.beta.messages.count_tokens(model="m", messages=messages, betas=[BETA]).input_tokens
    assert whole > TRIGGER["value"]
    before = compactions(server)
    message = create(client, stream, model="m", max_tokens=50, messages=messages,
                     context_management=compact_edit())
    assert compactions(server) == before + 1
    assert [b.type for b in message.content] == ["compaction", "text"]
    assert message.content[0].content == SUMMARY and message.content[1].text == ANSWER
    assert message.stop_reason == "end_turn"
    assert message.context_management.applied_edits == []
    summary_usage, answer_usage = message.usage.iterations
    assert summary_usage.type == "compaction" and answer_usage.type == "message"
    # the summary read the whole conversation and wrote the summary; the answer read the summary only
    assert summary_usage.input_tokens + summary_usage.cache_read_input_tokens > whole
    assert summary_usage.output_tokens > 0
    assert prompt_tokens(message) == (answer_usage.input_tokens + answer_usage.cache_read_input_tokens
                                      + answer_usage.cache_creation_input_tokens) < whole
    assert message.usage.output_tokens == answer_usage.output_tokens > 0

    # sent back, the block stands for everything before it: short, under the trigger, no new compaction
    messages += [{"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]},
                 {"role": "user", "content": "Thanks."}]
    counted = client.beta.messages.count_tokens(model="m", messages=messages, betas=[BETA]).input_tokens
    assert counted < TRIGGER["value"] < whole
    follow = create(client, stream, model="m", max_tokens=50, messages=messages, context_management=compact_edit())
    assert [b.type for b in follow.content] == ["text"] and follow.usage.iterations is None
    assert compactions(server) == before + 1
    assert prompt_tokens(follow) == counted


@pytest.mark.parametrize("stream", [False, True])
def test_pause_after_compaction_stops_with_the_block_alone(server, stream):
    client = anthropic_sdk(server)
    messages = history()
    message = create(client, stream, model="m", max_tokens=50, messages=messages,
                     context_management=compact_edit(pause_after_compaction=True))
    assert message.stop_reason == "compaction"
    assert [b.model_dump(exclude_none=True) for b in message.content] == [{"type": "compaction", "content": SUMMARY}]
    assert [i.type for i in message.usage.iterations] == ["compaction"]
    assert message.usage.input_tokens == message.usage.output_tokens == 0   # the top level is the answer's
    # the client appends the block and asks again: the model answers from the summary
    messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
    follow = create(client, stream, model="m", max_tokens=50, messages=messages, context_management=compact_edit())
    assert [b.type for b in follow.content] == ["text"] and follow.content[0].text == ANSWER


@pytest.mark.parametrize("stream", [False, True])
def test_a_conversation_past_the_context_is_compacted_in_pieces(server, stream):
    client = anthropic_sdk(server)
    turn = LONG[:len(LONG) // 2]
    messages = [{"role": role, "content": f"{n}: {turn}"} for n, role in enumerate(["user", "assistant"] * 4)]
    messages.append({"role": "user", "content": "So?"})
    with pytest.raises(anthropic.BadRequestError) as info:     # without the edit: too long
        client.beta.messages.create(model="m", max_tokens=50, messages=messages, betas=[BETA])
    assert "context" in info.value.message
    before = compactions(server)
    message = create(client, stream, model="m", max_tokens=50, messages=messages, context_management=compact_edit())
    assert compactions(server) >= before + 2                   # a piece, then the rest with its summary
    assert [b.type for b in message.content] == ["compaction", "text"] and message.content[1].text == ANSWER
    assert message.usage.iterations[0].input_tokens + message.usage.iterations[0].cache_read_input_tokens > CONTEXT


@pytest.mark.parametrize("stream", [False, True])
def test_the_compaction_parameter_only_compacts_and_its_block_may_open_the_next_request(server, stream):
    client = anthropic_sdk(server)
    short = [{"role": "user", "content": "Hi"}]
    before = compactions(server)
    message = create(client, stream, model="m", max_tokens=50, messages=short, compaction={"type": "summarize"})
    assert compactions(server) == before + 1                      # however short the conversation
    assert message.stop_reason == "compaction"
    assert [b.model_dump(exclude_none=True) for b in message.content] == [{"type": "compaction", "content": SUMMARY}]
    # sent first in the next request's messages, in a user turn
    follow = create(client, stream, model="m", max_tokens=50, messages=[
        {"role": "user", "content": [message.content[0].model_dump(exclude_none=True), {"type": "text", "text": "Go on."}]}])
    assert follow.content[0].text == ANSWER
    assert client.beta.messages.count_tokens(model="m", messages=short, compaction={"type": "summarize"},
                                             betas=[BETA]).input_tokens < 20      # counted as sent


def test_a_summary_alone_is_not_compacted_again(server):
    """A paused compaction's block sent back, with a system prompt past the trigger on its own:
    summarising the summary would shorten nothing, and every turn would compact."""
    client = anthropic_sdk(server)
    messages = [{"role": "user", "content": "Hi"},
                {"role": "assistant", "content": [{"type": "compaction", "content": SUMMARY}]}]
    counted = client.beta.messages.count_tokens(model="m", system=LONG, messages=messages, betas=[BETA]).input_tokens
    assert counted > TRIGGER["value"]
    before = compactions(server)
    message = create(client, False, model="m", max_tokens=50, system=LONG, messages=messages,
                     context_management=compact_edit())
    assert [b.type for b in message.content] == ["text"] and compactions(server) == before


def test_the_stream_holds_the_compaction_block_in_its_own_events(server):
    body = {"model": "m", "max_tokens": 50, "messages": history(), "stream": True,
            "context_management": compact_edit()}
    resp = request(server.port, post_json("/v1/messages?beta=true", body, f"anthropic-beta: {BETA}\r\n"), timeout=60)
    assert resp.status == 200
    events = parse_sse(resp.body, comments=True)
    blocks = check_wire(events)
    assert [b["type"] for b in blocks] == ["compaction", "text"]
    assert blocks[0]["deltas"] == [{"type": "compaction_delta", "content": SUMMARY}]
    delta = [d for n, d in events if n == "message_delta"][0]
    assert [i["type"] for i in delta["usage"]["iterations"]] == ["compaction", "message"]


def test_instructions_replace_the_summarisation_prompt(server):
    client = anthropic_sdk(server)

    def summary_prompt(**fields) -> int:
        message = create(client, False, model="m", max_tokens=50, messages=history(),
                         context_management=compact_edit(pause_after_compaction=True, **fields))
        assert message.content[0].content == SUMMARY
        usage = message.usage.iterations[0]
        return usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens

    assert summary_prompt(instructions="Summarise.") < summary_prompt()


def test_blocks_before_a_compaction_block_are_left_out(server):
    client = anthropic_sdk(server)
    summary_only = [{"role": "assistant", "content": [{"type": "compaction", "content": SUMMARY}]}]
    # an unsigned thinking block would be a 400; before the summary, it is never read
    unread = [{"role": "user", "content": LONG},
              {"role": "assistant", "content": [{"type": "thinking", "thinking": "forged", "signature": "x"},
                                                {"type": "compaction", "content": SUMMARY}]}]
    expected = client.beta.messages.count_tokens(model="m", messages=summary_only, betas=[BETA]).input_tokens
    assert client.beta.messages.count_tokens(model="m", messages=unread, betas=[BETA]).input_tokens == expected
    message = create(client, False, model="m", max_tokens=50, messages=unread)
    assert message.content[0].text == ANSWER and prompt_tokens(message) == expected
    # a failed compaction's block (content null) changes nothing
    failed = [{"role": "user", "content": "Hi"},
              {"role": "assistant", "content": [{"type": "compaction", "content": None}, {"type": "text", "text": "Hello."}]},
              {"role": "user", "content": "Again"}]
    plain = [failed[0], {"role": "assistant", "content": "Hello."}, failed[2]]
    assert (client.beta.messages.count_tokens(model="m", messages=failed, betas=[BETA]).input_tokens
            == client.beta.messages.count_tokens(model="m", messages=plain, betas=[BETA]).input_tokens)


@pytest.mark.parametrize("body, param", [
    ({"context_management": compact_edit(trigger={"type": "input_tokens", "value": min_trigger(CONTEXT) - 1})},
     "context_management.edits[0].trigger.value"),
    ({"context_management": compact_edit(trigger={"type": "tool_uses", "value": 2000})},
     "context_management.edits[0].trigger"),
    ({"context_management": compact_edit(trigger={"type": "input_tokens", "value": "1000"})},
     "context_management.edits[0].trigger"),
    ({"context_management": compact_edit(pause_after_compaction="yes")},
     "context_management.edits[0].pause_after_compaction"),
    ({"context_management": compact_edit(instructions=["Summarise."])}, "context_management.edits[0].instructions"),
    ({"context_management": {"edits": [{"type": "compact_20260112"},
                                       {"type": "compact_20260112", "pause_after_compaction": True}]}},
     "context_management.edits"),
    ({"messages": [{"role": "assistant", "content": [{"type": "compaction", "content": ""}]}]},
     "messages[0].content[0].content"),
    ({"messages": [{"role": "user", "content": [{"type": "compaction", "content": 3}]}]},
     "messages[0].content[0].content"),
    ({"compaction": {"type": "summarize"}, "context_management": compact_edit()}, "compaction"),
    ({"compaction": {"type": "compact"}}, "compaction"),
    ({"compaction": {"type": "summarize", "instructions": 1}}, "compaction.instructions"),
])
def test_bad_edits_and_blocks_are_400_in_anthropics_shape(server, body, param):
    full = {"model": "m", "max_tokens": 20, "messages": [{"role": "user", "content": "Hi"}], **body}
    # count_tokens ignores the compaction parameter
    for path in ("/v1/messages",) + (("/v1/messages/count_tokens",) if "compaction" not in body else ()):
        resp = request(server.port, post_json(path, full))
        assert resp.status == 400, resp.body
        error = resp.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        assert param in error["error"]["message"]


@pytest.mark.parametrize("stream", [False, True])
def test_what_the_answer_would_refuse_is_refused_before_the_summary(server, stream):
    before = compactions(server)
    body = {"model": "m", "max_tokens": 20, "messages": history(), "stream": stream, "grammar": "root ::= (",
            "context_management": compact_edit()}
    resp = request(server.port, post_json("/v1/messages", body))
    assert resp.status == 400 and resp.json()["error"]["type"] == "invalid_request_error", resp.body
    assert compactions(server) == before
