"""What coding agents send on the Anthropic Messages wire, through the official SDK in strict mode.

System messages inside `messages`, adaptive thinking and effort, thinking display
"omitted" and its round trip, context_management edits, cache_control breakpoints in
usage, count_tokens without model work, unknown betas and fields. Tiny real models: the
ChatML one of conftest, a Qwen3-template one (thinking, tools; its data dir holds the
signing key, so tests can sign history the way the server does) and a Mistral-template
one (no system turn after the first message). Output is forced with GBNF grammars.
"""

from __future__ import annotations

import json
import re
import uuid

import anthropic
import pytest

from clients import anthropic_sdk
from conftest import ServerProcess
from family_templates import write_family_gguf
from rawhttp import post_json, request
from sse import parse_sse
from test_anthropic import TIME, TIME_CALL, check_wire, prompt_tokens

from localserve.dialects.signing import load_signing_key, sign

CONTEXT = 16384
INTERLEAVED = "interleaved-thinking-2025-05-14"     # the beta under which a thinking budget may pass max_tokens
HELLO = 'root ::= "Hello, world!"'
THINK_THEN_HELLO = 'root ::= "I should greet them." "</think>" "\\n\\n" "Hello there!"'
THINK_THEN_CALL = f'root ::= "Check the clock." "</think>" "\\n\\n" "{TIME_CALL}"'


def unique(text: str) -> str:
    """A prompt no earlier request cached."""
    return f"{text} {uuid.uuid4().hex[:8]}"


def family_model(models_dir, name: str):
    # a long context: Claude Code's ~25 tools take thousands of tokens of this tiny vocabulary
    return write_family_gguf(models_dir / f"tiny-agents-{name}.gguf", name, context_length=CONTEXT)


@pytest.fixture(scope="module")
def qwen3(models_dir, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("agents-qwen3-data")
    srv = ServerProcess(family_model(models_dir, "qwen3"), "--model-id", "qwen3", "--data-dir", str(data_dir),
                        "--ctx-size", str(CONTEXT))
    srv.signing_key = load_signing_key(data_dir)       # the key the server made there
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def mistral(models_dir):
    srv = ServerProcess(family_model(models_dir, "mistral"), "--model-id", "mistral", "--no-store")
    yield srv
    srv.stop()


def apply_template(srv: ServerProcess, messages: list[dict]) -> str:
    resp = request(srv.port, post_json("/apply-template", {"messages": messages}))
    assert resp.status == 200, resp.body
    return resp.json()["prompt"]


# ---- role "system" inside messages (rendering alone: tests/unit/prompt/test_system_turns.py) ----

def create(client: anthropic.Anthropic, stream: bool, **kwargs):
    """The whole message, from a create call or from a stream."""
    if not stream:
        return client.beta.messages.create(**kwargs)
    with client.beta.messages.stream(**kwargs) as s:
        return s.get_final_message()


@pytest.mark.parametrize("stream", [False, True])
def test_system_messages_are_accepted_and_rendered(qwen3, mistral, stream):
    body = dict(model="m", system="Be terse.", messages=[
        {"role": "system", "content": "Also be kind."},        # before any turn: joins the system prompt
        {"role": "user", "content": "List files"},
        {"role": "system", "content": [{"type": "text", "text": "The user is in /tmp."}]},
    ])
    for srv, expected in ((qwen3, [{"role": "system", "content": "Be terse.\nAlso be kind."},
                                   {"role": "user", "content": "List files"},
                                   {"role": "system", "content": "The user is in /tmp."}]),
                          (mistral, None)):
        client = anthropic_sdk(srv)
        counted = client.beta.messages.count_tokens(**body)
        message = create(client, stream, max_tokens=50, **body, extra_body={"grammar": HELLO})
        assert message.stop_reason == "end_turn" and prompt_tokens(message) == counted.input_tokens
        if expected:
            assert counted.input_tokens == len(tokenize(srv, apply_template(srv, expected)))
    text = apply_template(mistral, [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"},
                                    {"role": "system", "content": "Sys"}])
    assert "Hi\n\n<system>\nSys\n</system>" in text


def tokenize(srv: ServerProcess, text: str) -> list[int]:
    resp = request(srv.port, post_json("/tokenize", {"content": text, "add_special": True, "parse_special": True}))
    assert resp.status == 200, resp.body
    return resp.json()["tokens"]


def test_system_message_clear_at_next_user_message(qwen3):
    client = anthropic_sdk(qwen3)
    reminder = {"role": "system", "content": "One-off reminder.", "clear_at": "next_user_message"}
    first = [{"role": "user", "content": "one"}, reminder]
    later = first + [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "two"}]
    plain = [m for m in later if m is not reminder]
    assert client.beta.messages.count_tokens(model="m", messages=first).input_tokens > \
        client.beta.messages.count_tokens(model="m", messages=first[:1]).input_tokens
    assert client.beta.messages.count_tokens(model="m", messages=later).input_tokens == \
        client.beta.messages.count_tokens(model="m", messages=plain).input_tokens


# ---- adaptive thinking, effort, display omitted ------------------------------------------

@pytest.mark.parametrize("stream", [False, True])
def test_adaptive_thinking_answers_with_a_thinking_block(qwen3, stream):
    client = anthropic_sdk(qwen3)
    user = [{"role": "user", "content": "Say hello"}]
    kwargs = dict(model="m", max_tokens=100, messages=user, thinking={"type": "adaptive"},
                  output_config={"effort": "medium"}, extra_body={"grammar": THINK_THEN_HELLO})
    message = create(client, stream, **kwargs)
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "I should greet them."
    enabled = client.beta.messages.count_tokens(model="m", messages=user,
                                                thinking={"type": "enabled", "budget_tokens": 2000})
    assert prompt_tokens(message) == enabled.input_tokens      # the template's thinking switch is on


@pytest.mark.parametrize("stream", [False, True])
def test_display_omitted_leaves_the_text_out_and_the_signature_brings_it_back(qwen3, stream):
    client = anthropic_sdk(qwen3)
    user = [{"role": "user", "content": unique("What time is it?")}]
    kwargs = dict(model="m", max_tokens=100, messages=user, tools=[TIME], extra_body={"grammar": THINK_THEN_CALL},
                  betas=[INTERLEAVED])          # as Claude Code sends it: the budget may pass max_tokens
    omitted_thinking = {"type": "enabled", "budget_tokens": 31999, "display": "omitted"}
    if stream:
        with client.beta.messages.stream(thinking=omitted_thinking, **kwargs) as s:
            message = s.get_final_message()
    else:
        message = client.beta.messages.create(thinking=omitted_thinking, **kwargs)
    shown = client.beta.messages.create(thinking={"type": "enabled", "budget_tokens": 31999}, **kwargs)
    assert [b.type for b in message.content] == ["thinking", "tool_use"]
    assert message.content[0].thinking == "" and shown.content[0].thinking == "Check the clock."
    assert message.content[0].signature == shown.content[0].signature     # the same text, sealed

    use = message.content[1]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "12:00"}]}

    def history(thinking_block: dict) -> list:
        return user + [{"role": "assistant", "content": [thinking_block, use.model_dump(exclude_none=True)]}, result]

    returned = history(message.content[0].model_dump(exclude_none=True))
    full = history(shown.content[0].model_dump(exclude_none=True))
    counted = client.beta.messages.count_tokens(model="m", messages=full, tools=[TIME])
    reply = client.beta.messages.create(model="m", max_tokens=2, messages=returned, tools=[TIME])
    assert prompt_tokens(reply) == counted.input_tokens         # the text was restored into the prompt
    assert reply.usage.cache_read_input_tokens > len(tokenize(qwen3, user[0]["content"]))

    forged = {"type": "thinking", "thinking": "", "signature": message.content[0].signature[:-6] + "AAAA=="}
    with pytest.raises(anthropic.BadRequestError) as err:
        client.beta.messages.create(model="m", max_tokens=2, messages=history(forged), tools=[TIME])
    assert "signature" in err.value.body["error"]["message"]


def test_display_omitted_on_the_wire(qwen3):
    resp = request(qwen3.port, post_json("/v1/messages?beta=true", {
        "model": "m", "max_tokens": 100, "stream": True, "messages": [{"role": "user", "content": "Hi"}],
        "thinking": {"type": "adaptive", "display": "omitted"}, "grammar": THINK_THEN_HELLO}), timeout=60)
    blocks = check_wire(parse_sse(resp.body, comments=True))
    assert [b["type"] for b in blocks] == ["thinking", "text"]
    assert [d["type"] for d in blocks[0]["deltas"]] == ["signature_delta"]
    assert blocks[0]["thinking"] == "" and blocks[0]["deltas"][0]["signature"]


# ---- context_management -------------------------------------------------------------------

def signed_turn(srv, thinking: str, call_id: str) -> list[dict]:
    """An assistant turn (signed thinking, a get_time call) and its tool result."""
    return [{"role": "assistant", "content": [
                {"type": "thinking", "thinking": thinking, "signature": sign(srv.signing_key, thinking)},
                {"type": "tool_use", "id": call_id, "name": "get_time", "input": {"zone": "UTC"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id,
                                          "content": f"the clock said {call_id} " * 5}]}]


def tool_loop(srv) -> list[dict]:
    return ([{"role": "user", "content": unique("Time in three zones?")}]
            + signed_turn(srv, "First I look at UTC.", "toolu_a") + signed_turn(srv, "Then once more.", "toolu_b")
            + signed_turn(srv, "And a last time.", "toolu_c"))


def test_clear_thinking_keep_all_changes_nothing(qwen3):
    client = anthropic_sdk(qwen3)
    messages = tool_loop(qwen3)
    plain = client.beta.messages.count_tokens(model="m", messages=messages, tools=[TIME])
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    message = client.beta.messages.create(model="m", max_tokens=5, messages=messages, tools=[TIME],
                                          context_management=edits, extra_body={"grammar": HELLO})
    assert message.context_management.applied_edits == []
    assert prompt_tokens(message) == plain.input_tokens


@pytest.mark.parametrize("stream", [False, True])
def test_clear_thinking_keeps_the_last_turns(qwen3, stream):
    client = anthropic_sdk(qwen3)
    messages = tool_loop(qwen3)
    body = dict(model="m", messages=messages, tools=[TIME], thinking={"type": "enabled", "budget_tokens": 1024},
                context_management={"edits": [{"type": "clear_thinking_20251015",
                                                "keep": {"type": "thinking_turns", "value": 1}}]})
    counted = client.beta.messages.count_tokens(**body)
    unedited = client.beta.messages.count_tokens(**{k: v for k, v in body.items() if k != "context_management"})
    assert counted.context_management.original_input_tokens == unedited.input_tokens > counted.input_tokens
    if stream:
        resp = request(qwen3.port, post_json("/v1/messages?beta=true",
                                             {**body, "max_tokens": 5, "stream": True, "grammar": HELLO},
                                             f"anthropic-beta: {INTERLEAVED}\r\n"), timeout=60)
        events = parse_sse(resp.body, comments=True)
        check_wire(events)
        delta = [d for n, d in events if n == "message_delta"][0]
        applied = delta["context_management"]["applied_edits"]
        total = sum(delta["usage"][k] for k in ("input_tokens", "cache_read_input_tokens",
                                                "cache_creation_input_tokens"))
    else:
        message = client.beta.messages.create(max_tokens=5, **body, extra_body={"grammar": HELLO},
                                              betas=[INTERLEAVED])
        applied = [e.model_dump() for e in message.context_management.applied_edits]
        total = prompt_tokens(message)
    assert applied == [{"type": "clear_thinking_20251015", "cleared_thinking_turns": 2,
                        "cleared_input_tokens": unedited.input_tokens - counted.input_tokens}]
    assert total == counted.input_tokens


def test_clear_tool_uses(qwen3):
    client = anthropic_sdk(qwen3)
    messages = tool_loop(qwen3)
    base = dict(model="m", messages=messages, tools=[TIME])
    unedited = client.beta.messages.count_tokens(**base).input_tokens

    def run(**edit) -> tuple[list, int]:
        management = {"edits": [{"type": "clear_tool_uses_20250919", **edit}]}
        message = client.beta.messages.create(max_tokens=5, context_management=management, **base,
                                              extra_body={"grammar": HELLO})
        counted = client.beta.messages.count_tokens(context_management=management, **base)
        assert prompt_tokens(message) == counted.input_tokens
        return [e.model_dump() for e in message.context_management.applied_edits], counted.input_tokens

    # the default trigger (100000 tokens) is far away: nothing happens
    assert run() == ([], unedited)
    low = {"type": "input_tokens", "value": 10}
    applied, tokens = run(trigger=low, keep={"type": "tool_uses", "value": 1})
    assert applied == [{"type": "clear_tool_uses_20250919", "cleared_tool_uses": 2,
                        "cleared_input_tokens": unedited - tokens}] and tokens < unedited
    inputs_too, fewer = run(trigger={"type": "tool_uses", "value": 2}, keep={"type": "tool_uses", "value": 1},
                            clear_tool_inputs=True)
    assert inputs_too[0]["cleared_tool_uses"] == 2 and fewer < tokens
    assert run(trigger=low, exclude_tools=["get_time"]) == ([], unedited)
    assert run(trigger=low, keep={"type": "tool_uses", "value": 0},
               clear_at_least={"type": "input_tokens", "value": 100000}) == ([], unedited)
    assert run(trigger={"type": "tool_uses", "value": 3}) == ([], unedited)        # three uses: not past it


@pytest.mark.parametrize("edits, needle", [
    ({"edits": "all"}, "context_management.edits"),
    ({"edits": [{"keep": "all"}]}, "context_management.edits[0]"),
    ({"edits": [{"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": -1}}]}, "keep"),
    ({"edits": [{"type": "clear_tool_uses_20250919", "trigger": {"type": "turns", "value": 3}}]}, "trigger"),
    ({"edits": [{"type": "clear_tool_uses_20250919", "exclude_tools": "Bash"}]}, "exclude_tools"),
])
def test_bad_edits_are_400_naming_the_param(server, edits, needle):
    resp = request(server.port, post_json("/v1/messages", {"model": "m", "max_tokens": 5, "context_management": edits,
                                                           "messages": [{"role": "user", "content": "hi"}]}))
    assert resp.status == 400 and resp.json()["error"]["type"] == "invalid_request_error"
    assert needle in resp.json()["error"]["message"]


# ---- cache_control in usage ---------------------------------------------------------------

def cached_body(text: str) -> dict:
    return dict(model="m", max_tokens=5, extra_body={"grammar": HELLO},
                system=[{"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cc_entrypoint=cli"},
                        {"type": "text", "text": "You are a coding agent. " * 10,
                         "cache_control": {"type": "ephemeral"}}],
                messages=[{"role": "user", "content": [
                    {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]}])


@pytest.mark.parametrize("stream", [False, True])
def test_cache_breakpoints_split_the_prompt_in_usage(server, stream):
    client = anthropic_sdk(server)
    body = cached_body(unique("Read the file and tell me what it does."))

    def send(**kwargs):
        if stream:
            with client.beta.messages.stream(**kwargs) as s:
                start = None
                for event in s:
                    if event.type == "message_start":
                        start = event.message.usage
                message = s.get_final_message()
            assert start.cache_read_input_tokens == message.usage.cache_read_input_tokens
            assert start.cache_creation_input_tokens == message.usage.cache_creation_input_tokens
            return message
        return client.beta.messages.create(**kwargs)

    counted = client.beta.messages.count_tokens(model="m", system=body["system"], messages=body["messages"])
    first = send(**body)
    u = first.usage
    assert prompt_tokens(first) == counted.input_tokens
    # all new up to the last breakpoint (the end of the user turn): only the generation prompt follows
    assert u.cache_creation_input_tokens > u.input_tokens > 0
    second = send(**body)
    v = second.usage
    assert prompt_tokens(second) == counted.input_tokens
    assert v.cache_read_input_tokens >= u.cache_creation_input_tokens and v.cache_creation_input_tokens == 0
    # one more turn: the old prompt is read, the new turn up to its breakpoint is created
    longer = dict(body, messages=body["messages"] + [
        {"role": "assistant", "content": "Hello, world!"},
        {"role": "user", "content": [{"type": "text", "text": "Now explain it in more detail please.",
                                      "cache_control": {"type": "ephemeral"}}]}])
    third = send(**longer)
    w = third.usage
    assert w.cache_read_input_tokens >= u.cache_creation_input_tokens and w.cache_creation_input_tokens > 0
    assert prompt_tokens(third) == client.beta.messages.count_tokens(
        model="m", system=longer["system"], messages=longer["messages"]).input_tokens


def test_claude_codes_billing_header_line_costs_no_cache(server):
    client = anthropic_sdk(server)
    system = [{"type": "text", "text": "You are Claude Code. " * 20, "cache_control": {"type": "ephemeral"}}]
    messages = [{"role": "user", "content": unique("hello")}]

    def header(nonce: str) -> dict:
        return {"type": "text", "text": f"x-anthropic-billing-header: cc_version=2.1.332.{nonce}; "
                                        f"cc_entrypoint=cli; cch={nonce}1f;"}
    plain = client.messages.count_tokens(model="m", system=system, messages=messages).input_tokens
    assert client.messages.count_tokens(model="m", system=[header("a0c"), *system],
                                        messages=messages).input_tokens == plain
    first = client.messages.create(model="m", max_tokens=5, system=[header("a0c"), *system], messages=messages,
                                   extra_body={"grammar": HELLO})
    second = client.messages.create(model="m", max_tokens=5, system=[header("7d2"), *system], messages=messages,
                                    extra_body={"grammar": HELLO})
    assert prompt_tokens(first) == prompt_tokens(second) == plain
    assert second.usage.cache_read_input_tokens >= first.usage.cache_creation_input_tokens
    as_text = client.messages.count_tokens(model="m", system=header("a0c")["text"] + "\n" + system[0]["text"],
                                           messages=messages)
    assert as_text.input_tokens == plain


def test_without_cache_control_nothing_is_created(server):
    client = anthropic_sdk(server)
    text = unique("No breakpoints here, just a question.")
    message = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": text}],
                                     extra_body={"grammar": HELLO})
    assert message.usage.cache_creation_input_tokens == 0
    again = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": text}],
                                   extra_body={"grammar": HELLO})
    assert again.usage.cache_read_input_tokens > 0
    assert again.usage.input_tokens == prompt_tokens(again) - again.usage.cache_read_input_tokens


def test_automatic_cache_control_marks_the_last_message(server):
    client = anthropic_sdk(server)
    text = unique("Automatic caching for this one.")
    message = client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": text}],
                                     extra_body={"grammar": HELLO, "cache_control": {"type": "ephemeral"}})
    assert message.usage.cache_creation_input_tokens > message.usage.input_tokens > 0


# ---- count_tokens does no model work --------------------------------------------------------

def metric(srv: ServerProcess, name: str) -> float:
    text = request(srv.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").body.decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def test_count_tokens_runs_no_job_and_touches_no_slot(server):
    client = anthropic_sdk(server)
    slots = request(server.port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()
    generations = metric(server, "localserve_generations_total")
    prompt = metric(server, "localserve_prompt_tokens_total")
    body = cached_body(unique("Count me " * 50))
    counts = {client.beta.messages.count_tokens(model="m", system=body["system"], messages=body["messages"],
                                                thinking={"type": "enabled", "budget_tokens": 31999},
                                                tools=[TIME]).input_tokens for _ in range(5)}
    assert len(counts) == 1 and counts.pop() > 100
    assert metric(server, "localserve_generations_total") == generations
    assert metric(server, "localserve_prompt_tokens_total") == prompt
    assert request(server.port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json() == slots


# ---- what agents send beyond the API they were written against -----------------------------

def test_unknown_betas_fields_and_the_beta_query_are_accepted(server):
    client = anthropic_sdk(server)
    message = client.beta.messages.create(
        model="claude-opus-4-7", max_tokens=50, messages=[{"role": "user", "content": "hi"}],
        betas=["interleaved-thinking-2025-05-14", "context-management-2025-06-27", "something-new-2099-01-01"],
        metadata={"user_id": "user_abc_account_def_session_0f3c"},
        extra_body={"grammar": HELLO, "speed": "fast", "a_field_from_the_future": {"x": [1, 2]},
                    "context_management": {"edits": [{"type": "compact_20260112"}]}},
        extra_headers={"anthropic-beta": "claude-code-20250219,oauth-2025-04-20,fine-grained-tool-streaming"})
    assert message.content[0].text == "Hello, world!" and message.context_management.applied_edits == []
    resp = request(server.port, post_json("/v1/messages?beta=true&other=1", {
        "model": "m", "max_tokens": 50, "grammar": HELLO, "messages": [{"role": "user", "content": "hi"}]},
        headers="anthropic-beta: made-up-2030-01-01\r\nanthropic-version: 2099-01-01\r\n"))
    assert resp.status == 200 and resp.json()["content"][0]["text"] == "Hello, world!"
    counted = request(server.port, post_json("/v1/messages/count_tokens?beta=true", {
        "model": "m", "messages": [{"role": "user", "content": "hi"}], "unknown": True},
        headers="anthropic-beta: token-counting-2024-11-01\r\n"))
    assert counted.status == 200 and counted.json()["input_tokens"] > 0


BASH_CALL = TIME_CALL.replace("get_time", "Bash").replace("zone", "command").replace("UTC", "ls")


@pytest.mark.parametrize("stream", [False, True])
def test_server_tools_are_left_out_and_named_in_a_header(qwen3, stream):
    client = anthropic_sdk(qwen3)
    server_tools = [{"type": "web_search_20250305", "name": "web_search", "max_uses": 8},
                    {"type": "web_fetch_20250910", "name": "web_fetch"},
                    {"type": "code_execution_20250825", "name": "code_execution"}]
    messages = [{"role": "user", "content": "Search the web"}]
    plain = client.beta.messages.count_tokens(model="m", messages=messages, tools=[TIME]).input_tokens
    assert client.beta.messages.count_tokens(model="m", messages=messages,
                                             tools=[*server_tools, TIME]).input_tokens == plain
    kwargs = dict(model="m", max_tokens=50, messages=messages, tools=[*server_tools, TIME],
                  thinking={"type": "disabled"}, extra_body={"grammar": HELLO})
    if stream:
        with client.beta.messages.with_streaming_response.create(stream=True, **kwargs) as raw:
            header = raw.headers.get("x-localserve-ignored-tools")
            blocks = check_wire(parse_sse(raw.read(), comments=True))
        assert "".join(d["text"] for d in blocks[0]["deltas"]) == "Hello, world!"
    else:
        raw = client.beta.messages.with_raw_response.create(**kwargs)
        header = raw.headers.get("x-localserve-ignored-tools")
        assert raw.parse().content[0].text == "Hello, world!"
    assert header == "web_search_20250305, web_fetch_20250910, code_execution_20250825"
    assert qwen3.wait_log("server tools left out")


def test_tool_search_results_come_back_as_text(qwen3):
    client = anthropic_sdk(qwen3)
    messages = [{"role": "user", "content": "Find a tool"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_s", "name": "ToolSearch",
                                                   "input": {"query": "select:get_time"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_s", "content": [
                    {"type": "tool_reference", "tool_name": "get_time"}]}]}]
    counted = client.beta.messages.count_tokens(model="m", messages=messages, tools=[TIME])
    assert counted.input_tokens > 0


def claude_code_tools() -> list[dict]:
    """~25 tools as Claude Code sends them: some deferred, the last one marked for caching."""
    tools = [{"name": f"Tool{i}", "description": f"Tool number {i}", "defer_loading": i >= 20,
              "input_schema": {"type": "object", "$schema": "http://json-schema.org/draft-07/schema#",
                               "additionalProperties": False, "required": ["arg"],
                               "properties": {"arg": {"type": "string", "description": "what to do"}}}}
             for i in range(24)]
    tools.append({"name": "Bash", "description": "Run a shell command",
                  "input_schema": {"type": "object", "required": ["command"],
                                   "properties": {"command": {"type": "string"},
                                                  "timeout": {"type": "number"}}},
                  "cache_control": {"type": "ephemeral"}})
    return tools


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_shaped_like_claude_codes(qwen3, stream):
    body = {
        "model": "claude-sonnet-4-5-20250929", "max_tokens": 32000, "stream": stream,
        "system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.332; cc_entrypoint=sdk-cli;"},
                   {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>context</system-reminder>"},
            {"type": "text", "text": unique("make a file"), "cache_control": {"type": "ephemeral"}}]},
            {"role": "system", "content": "The working directory is /tmp/x."}],
        "tools": claude_code_tools(), "metadata": {"user_id": "user_1_account__session_2"},
        "thinking": {"type": "enabled", "budget_tokens": 31999, "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "high"}, "temperature": 1,
        "grammar": f'root ::= "Check the clock." "</think>" "\\n\\n" "{BASH_CALL}"',
    }
    headers = "anthropic-beta: claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27\r\n"
    resp = request(qwen3.port, post_json("/v1/messages?beta=true", body, headers=headers), timeout=60)
    assert resp.status == 200, resp.body
    if stream:
        blocks = check_wire(parse_sse(resp.body, comments=True))
        assert [b["type"] for b in blocks] == ["thinking", "tool_use"]
        assert blocks[0]["thinking"] == "" and [d["type"] for d in blocks[0]["deltas"]] == ["signature_delta"]
        assert json.loads("".join(d["partial_json"] for d in blocks[1]["deltas"])) == {"command": "ls"}
    else:
        message = resp.json()
        assert [b["type"] for b in message["content"]] == ["thinking", "tool_use"]
        assert message["content"][0]["thinking"] == "" and message["content"][1]["input"] == {"command": "ls"}
        assert message["stop_reason"] == "tool_use"
        assert message["context_management"] == {"applied_edits": []}
        assert message["usage"]["cache_creation_input_tokens"] > message["usage"]["input_tokens"]
