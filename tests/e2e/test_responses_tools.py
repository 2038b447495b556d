"""Responses with what coding agents send, through the official `openai` SDK in strict mode:
every tool type (function, namespace, custom with a grammar, local_shell, hosted tools left
out), sealed reasoning (`encrypted_content`) with store off, and Codex's other fields.

The agent loop runs on a scripted model (tests/support/scripted_model.py) whose turns are: think and
call a namespaced function; call the custom apply_patch tool; call local_shell; answer. Grammar
constraints run on the tiny random model, where only the grammar decides what is written.
"""

from __future__ import annotations

import base64
import json
import re

import openai
import pytest

from clients import openai_sdk
from conftest import ServerProcess
from rawhttp import post_json, request
from scripted_model import tool_call_token, write_scripted_gguf
from tinymodel import token_ids

from localserve.dialects.signing import NONCE_BYTES
from localserve.grammar.lark_regex import lark_to_regex

REASONING = "Add the task first."
PATCH = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch\n"
FINAL = "All three tools ran."
APPLY_PATCH_LARK = """start: begin_patch hunk+ end_patch
begin_patch: "*** Begin Patch" LF
end_patch: "*** End Patch" LF?
hunk: add_hunk | delete_hunk
add_hunk: "*** Add File: " filename LF add_line+
delete_hunk: "*** Delete File: " filename LF
filename: /(.+)/
add_line: "+" /(.*)/ LF -> line
%import common.LF
"""
SCRIPT = [
    [f"<think>{REASONING}</think>", tool_call_token("tasks.add", {"title": "write"})],
    [tool_call_token("apply_patch", {"input": PATCH})],
    [tool_call_token("local_shell", {"command": ["ls", "-l"], "workdir": "/tmp"})],
    [FINAL],
]
TOOLS = [
    {"type": "namespace", "name": "tasks", "description": "Task list tools.", "tools": [
        {"type": "function", "name": "add", "description": "Add a task.",
         "parameters": {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}}]},
    {"type": "custom", "name": "apply_patch", "description": "Edit files with a patch.",
     "format": {"type": "grammar", "syntax": "lark", "definition": APPLY_PATCH_LARK}},
    {"type": "local_shell"},
    {"type": "web_search", "external_web_access": False},
    {"type": "image_generation"},
]
SEALED = ["reasoning.encrypted_content"]


@pytest.fixture(scope="module")
def agent_model(models_dir):
    return write_scripted_gguf(models_dir / "responses-agent.gguf", SCRIPT)


@pytest.fixture(scope="module")
def agent_data(tmp_path_factory):
    return tmp_path_factory.mktemp("agent-data")


@pytest.fixture(scope="module")
def agent(agent_model, agent_data):
    srv = ServerProcess(agent_model, "--model-id", "agent", "--slots", "1", env={"XDG_DATA_HOME": str(agent_data)})
    yield srv
    srv.stop()


def create(client, stream: bool, **body):
    """A response, and (streamed) its events; the Response from response.completed."""
    body.setdefault("model", "agent")
    if not stream:
        return client.responses.create(**body), []
    events = list(client.responses.create(stream=True, **body))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert events[-1].type == "response.completed"
    return events[-1].response, events


def replay(items) -> list[dict]:
    """Output items as a stateless client sends them back: reasoning by its sealed blob alone."""
    out = []
    for item in items:
        data = item.model_dump(exclude_none=True)
        if data["type"] == "reasoning":
            data = {"type": "reasoning", "id": data["id"], "summary": [],
                    "encrypted_content": data["encrypted_content"]}
        out.append(data)
    return out


@pytest.mark.parametrize("stream", [False, True])
def test_an_agent_loop_through_every_tool_kind(agent, stream):
    client = openai_sdk(agent)
    history: list = [{"role": "developer", "content": "You are an agent."}, {"role": "user", "content": "go"}]
    options = dict(tools=TOOLS, store=False, include=SEALED, reasoning={"summary": "auto"},
                   parallel_tool_calls=True, tool_choice="auto")

    # turn 1: reasoning (sealed) and a function call from a namespace
    first, events = create(client, stream, input=history, **options)
    reasoning, call = first.output
    assert reasoning.type == "reasoning" and reasoning.summary[0].text == REASONING
    assert reasoning.encrypted_content and REASONING not in reasoning.encrypted_content
    assert (call.type, call.name, call.namespace, json.loads(call.arguments)) == (
        "function_call", "add", "tasks", {"title": "write"})
    if stream:
        added = [e.item for e in events if e.type == "response.output_item.added"]
        assert added[1].type == "function_call" and added[1].namespace == "tasks" and added[1].name == "add"
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert done[0].name == "add" and json.loads(done[0].arguments) == {"title": "write"}
        sealed = [e.item for e in events if e.type == "response.output_item.done"][0]
        assert sealed.encrypted_content == reasoning.encrypted_content
    history += replay(first.output) + [{"type": "function_call_output", "call_id": call.call_id, "output": "ok"}]

    # turn 2: a custom (freeform) call; the sealed reasoning rendered back as generated
    second, events = create(client, stream, input=history, **options)
    cached = second.usage.input_tokens_details.cached_tokens
    assert cached >= first.usage.input_tokens + first.usage.output_tokens - 1
    [custom] = second.output
    assert (custom.type, custom.name, custom.input) == ("custom_tool_call", "apply_patch", PATCH)
    if stream:
        deltas = [e.delta for e in events if e.type == "response.custom_tool_call_input.delta"]
        [done] = [e for e in events if e.type == "response.custom_tool_call_input.done"]
        assert deltas and "".join(deltas) == PATCH and done.input == PATCH and done.item_id == custom.id
        assert not [e for e in events if e.type.startswith("response.function_call_arguments")]
    history += replay(second.output) + [
        {"type": "custom_tool_call_output", "call_id": custom.call_id, "output": "Done!"}]

    # turn 3: a local_shell call
    third, events = create(client, stream, input=history, **options)
    [shell] = third.output
    assert shell.type == "local_shell_call" and shell.action.type == "exec"
    assert shell.action.command == ["ls", "-l"] and shell.action.working_directory == "/tmp"
    assert third.usage.input_tokens_details.cached_tokens >= second.usage.input_tokens
    history += replay(third.output) + [{"type": "local_shell_call_output", "id": shell.call_id, "output": "a.txt"}]

    # turn 4: the answer
    fourth, _ = create(client, stream, input=history, **options)
    assert fourth.output_text == FINAL
    assert fourth.usage.input_tokens_details.cached_tokens >= third.usage.input_tokens


def test_a_stored_chain_through_every_tool_kind(agent):
    """previous_response_id: the stored custom and local shell calls come back as context."""
    client = openai_sdk(agent)
    first = client.responses.create(model="agent", input="go", tools=TOOLS, include=SEALED)
    call = first.output[-1]
    second = client.responses.create(model="agent", tools=TOOLS, previous_response_id=first.id, input=[
        {"type": "function_call_output", "call_id": call.call_id, "output": "ok"}])
    custom = second.output[0]
    assert custom.type == "custom_tool_call" and custom.input == PATCH
    assert second.usage.input_tokens_details.cached_tokens >= first.usage.input_tokens
    third = client.responses.create(model="agent", tools=TOOLS, previous_response_id=second.id, input=[
        {"type": "custom_tool_call_output", "call_id": custom.call_id, "output": "patched"}])
    shell = third.output[0]
    assert shell.type == "local_shell_call"
    fourth = client.responses.create(model="agent", tools=TOOLS, previous_response_id=third.id, input=[
        {"type": "local_shell_call_output", "id": shell.call_id, "output": "a.txt"}])
    assert fourth.output_text == FINAL
    items = client.responses.input_items.list(third.id)
    assert [i.type for i in items.data] == ["custom_tool_call_output"] and items.data[0].id.startswith("ctco_")
    assert client.responses.retrieve(second.id).output[0].type == "custom_tool_call"


def test_hosted_tools_are_left_out_and_reported(agent):
    raw = openai_sdk(agent).responses.with_raw_response.create(model="agent", input="hi", tools=TOOLS)
    assert raw.headers["x-localserve-ignored-tools"] == "web_search, image_generation"
    response = raw.parse()
    assert [t.type for t in response.tools] == ["namespace", "custom", "local_shell", "web_search",
                                                "image_generation"]
    assert agent.wait_log("hosted tools left out (they cannot run here): web_search, image_generation")
    plain = openai_sdk(agent).responses.with_raw_response.create(model="agent", input="hi", tools=TOOLS[:1])
    assert "x-localserve-ignored-tools" not in plain.headers
    streamed = request(agent.port, post_json("/v1/responses", {"input": "hi", "tools": TOOLS, "stream": True}))
    assert streamed.status == 200 and streamed.headers["x-localserve-ignored-tools"] == "web_search, image_generation"
    assert b"event: response.completed" in streamed.body


def sealed_reasoning(client) -> list:
    first = client.responses.create(model="agent", input="go", tools=TOOLS, store=False, include=SEALED)
    return first.output


def test_a_tampered_or_foreign_blob_is_a_400_and_the_server_keeps_serving(agent):
    client = openai_sdk(agent)
    output = sealed_reasoning(client)
    items = replay(output) + [{"type": "function_call_output", "call_id": output[1].call_id, "output": "ok"}]
    blob = items[0]["encrypted_content"]
    data = base64.urlsafe_b64decode(blob)
    # one bit of the nonce, of the ciphertext and of the tag, each blob still well-formed
    flips = [base64.urlsafe_b64encode(data[:i] + bytes([data[i] ^ 1]) + data[i + 1:]).decode()
             for i in (1, 1 + NONCE_BYTES, len(data) - 1)]
    for bad in (*flips, "not a blob", blob[:-8]):
        items[0]["encrypted_content"] = bad
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="agent", input=[{"role": "user", "content": "go"}, *items], tools=TOOLS)
        error = caught.value.body
        assert error["code"] == "invalid_encrypted_content" and error["param"] == "input[1].encrypted_content"
    items[0]["encrypted_content"] = blob
    ok = client.responses.create(model="agent", input=[{"role": "user", "content": "go"}, *items], tools=TOOLS)
    assert ok.output[0].type == "custom_tool_call"


def test_sealed_reasoning_outlives_a_restart_and_works_with_no_store(agent, agent_model, agent_data):
    blob_items = replay(sealed_reasoning(openai_sdk(agent)))
    call_id = blob_items[1]["call_id"]
    turn = [{"role": "user", "content": "go"}, *blob_items,
            {"type": "function_call_output", "call_id": call_id, "output": "ok"}]
    again = ServerProcess(agent_model, "--model-id", "agent", env={"XDG_DATA_HOME": str(agent_data)})
    no_store = ServerProcess(agent_model, "--model-id", "agent", "--no-store",
                             env={"XDG_DATA_HOME": str(agent_data)})
    try:
        # same data dir, same key: the blob opens after a restart
        assert openai_sdk(again).responses.create(model="agent", input=turn, tools=TOOLS).output[0].type == \
            "custom_tool_call"
        # --no-store: a key of its own, for the life of the process; its own blobs round trip
        with pytest.raises(openai.BadRequestError):
            openai_sdk(no_store).responses.create(model="agent", input=turn, tools=TOOLS)
        own = replay(sealed_reasoning(openai_sdk(no_store)))
        second = openai_sdk(no_store).responses.create(model="agent", tools=TOOLS, input=[
            {"role": "user", "content": "go"}, *own,
            {"type": "function_call_output", "call_id": own[1]["call_id"], "output": "ok"}])
        assert second.output[0].type == "custom_tool_call" and second.store is False
    finally:
        again.stop()
        no_store.stop()


def test_function_call_items_with_a_namespace_are_accepted_as_input(agent):
    history = [{"role": "user", "content": "go"},
               {"type": "function_call", "call_id": "c1", "name": "add", "namespace": "tasks", "arguments": "{}"},
               {"type": "function_call_output", "call_id": "c1", "output": "ok"},
               {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": PATCH},
               {"type": "custom_tool_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "ok"}]}]
    response = openai_sdk(agent).responses.create(model="agent", input=history, tools=TOOLS)
    assert response.output[0].type == "local_shell_call"    # two tool results: the script's third step


# ---- grammars on the tiny random model: only the grammar decides the text ---------------------

CALC_LARK = 'start: op " " NUM\nop: "add" | "sub"\nNUM: /[0-9]{1,3}/\n'


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("syntax,definition,language", [
    ("lark", CALC_LARK, r"(add|sub) [0-9]{1,3}"),
    ("regex", r"(yes|no)-[a-c]{2}", r"(yes|no)-[a-c]{2}"),
])
def test_a_forced_custom_call_follows_its_grammar(server, stream, syntax, definition, language):
    tool = {"type": "custom", "name": "calc", "format": {"type": "grammar", "syntax": syntax,
                                                         "definition": definition}}
    options = dict(model="tiny", input="compute", tools=[tool], tool_choice={"type": "custom", "name": "calc"},
                   max_output_tokens=400, temperature=1.0, extra_body={"seed": 7})
    response, _ = create(openai_sdk(server), stream, **options)
    calls = [item for item in response.output if item.type == "custom_tool_call"]
    assert response.status == "completed" and len(calls) == 1, response.output
    assert calls[0].name == "calc" and re.fullmatch(language, calls[0].input), calls[0].input


def test_codex_apply_patch_grammar_constrains_a_forced_call(server):
    # Its lines are unbounded (/(.+)/), so a random model runs out of tokens inside the call:
    # the call cut off, what it wrote so far held by the grammar.
    tool = {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark",
                                                                "definition": APPLY_PATCH_LARK}}
    response = openai_sdk(server).responses.create(model="tiny", input="patch", tools=[tool], max_output_tokens=400,
                                            tool_choice={"type": "custom", "name": "apply_patch"},
                                            extra_body={"seed": 5})
    assert response.status == "incomplete"
    [call] = response.output
    assert (call.type, call.name) == ("custom_tool_call", "apply_patch"), response.output
    assert re.match(r"\*\*\* Begin Patch\n\*\*\* (Add|Delete) File: ", call.input), call.input
    assert re.fullmatch(lark_to_regex(APPLY_PATCH_LARK), PATCH)


def test_a_grammar_that_cannot_be_enforced_is_a_400_only_when_the_call_is_forced(server):
    tool = {"type": "custom", "name": "expr", "format": {
        "type": "grammar", "syntax": "lark", "definition": 'start: "(" start ")" | "x"'}}
    resp = request(server.port, post_json("/v1/responses", {
        "input": "hi", "tools": [tool], "tool_choice": "required", "max_output_tokens": 2}))
    assert resp.status == 400
    error = resp.json()["error"]
    assert error["param"] == "tools" and "expr" in error["message"] and "recursive" in error["message"]
    auto = request(server.port, post_json("/v1/responses", {"input": "hi", "tools": [tool], "max_output_tokens": 2}))
    assert auto.status == 200
    assert request(server.port, post_json("/v1/responses", {"input": "hi", "max_output_tokens": 2})).status == 200


def test_a_forced_local_shell_call(server):
    # The random model writes strings of any length: a fixed seed, and '"' favoured so that each
    # argument ends well inside the token budget (unseeded, one run in a few ran out mid-call).
    quote = {str(token_ids()['"']): 4}
    response = openai_sdk(server).responses.create(model="tiny", input="list", tools=[{"type": "local_shell"}],
                                            tool_choice="required", parallel_tool_calls=False, max_output_tokens=300,
                                            extra_body={"seed": 11, "logit_bias": quote})
    [call] = [i for i in response.output if i.type == "local_shell_call"]
    assert call.action.type == "exec" and isinstance(call.action.command, list)


def test_everything_codex_sends_is_accepted(server):
    schema = {"type": "object", "properties": {"done": {"type": "boolean"}}, "required": ["done"],
              "additionalProperties": False}
    response = openai_sdk(server).responses.create(
        model="tiny", store=False, include=SEALED, reasoning={"summary": "auto"}, prompt_cache_key="session-1",
        parallel_tool_calls=True, tool_choice="auto", max_output_tokens=50,
        input=[{"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]},
               {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Done?"}]}],
        text={"format": {"type": "json_schema", "name": "status", "schema": schema, "strict": True},
              "verbosity": "low"},
        extra_body={"client_metadata": {"x-codex-turn-metadata": "{}"}})
    assert response.prompt_cache_key == "session-1" and response.store is False
    assert set(json.loads(response.output_text)) == {"done"}


# ---- prompt_cache_key: slot affinity ---------------------------------------------------------

@pytest.fixture(scope="module")
def unshared(tiny_model, tmp_path_factory):
    """The session's server as it was before prefix sharing: a prompt's head is reused only from
    the slot it lands on, so which slot a key picks shows in cached_tokens."""
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--slots", "2", "--no-prefix-sharing",
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("unshared"))})
    yield srv
    srv.stop()


def affinity_run(server, ask, tag: str, key_a: str | None, key_b: str | None) -> int:
    """Conversation B, then A, then A again with a rewritten tail (the shared prefix is well under
    half of what A's slot holds). Without a key the least recently used slot (B's) is taken;
    with A's key, A's own slot. Returns the cached tokens of A's second request."""
    shared = f"{tag} shared instructions " + "alpha beta gamma delta " * 40
    ask(f"{tag} another conversation " + "zeta eta theta " * 60, key_b)
    ask(shared + "first tail " + "one two three four " * 80, key_a)
    return ask(shared + "second tail " + "five six seven " * 20, key_a)


def test_prompt_cache_key_keeps_a_conversation_on_its_slot_in_responses(server, unshared):
    def asker(srv):
        client = openai_sdk(srv)

        def ask(text: str, key: str | None) -> int:
            options = {"prompt_cache_key": key} if key else {}
            response = client.responses.create(model="tiny", input=text, max_output_tokens=1, **options)
            return response.usage.input_tokens_details.cached_tokens
        return ask

    unkeyed = affinity_run(unshared, asker(unshared), "resp-plain", None, None)
    keyed = affinity_run(unshared, asker(unshared), "resp-keyed", "conv-a", "conv-b")
    assert keyed > 150 > unkeyed
    # with prefix sharing (the default) the head is copied into whichever slot A lands on
    assert affinity_run(server, asker(server), "resp-shared", None, None) > 150


def test_prompt_cache_key_keeps_a_conversation_on_its_slot_in_chat(server, unshared):
    def asker(srv):
        client = openai_sdk(srv)

        def ask(text: str, key: str | None) -> int:
            options = {"prompt_cache_key": key} if key else {}
            reply = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": text}],
                                                   max_tokens=1, **options)
            return reply.usage.prompt_tokens_details.cached_tokens
        return ask

    unkeyed = affinity_run(unshared, asker(unshared), "chat-plain", None, None)
    keyed = affinity_run(unshared, asker(unshared), "chat-keyed", "conv-c", "conv-d")
    assert keyed > 150 > unkeyed
    assert affinity_run(server, asker(server), "chat-shared", None, None) > 150


def test_a_namespace_without_a_description_echoes_as_the_sdk_expects(agent):
    response = openai_sdk(agent).responses.create(model="agent", input="hi", tools=[
        {"type": "namespace", "name": "ns", "tools": [{"type": "custom", "name": "c"}]}])
    assert response.tools[0].description == "" and response.tools[0].tools[0].name == "c"
    # the script calls tasks.add, which this request does not offer: it stays text
    assert response.output[-1].type == "message"
