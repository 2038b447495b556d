"""Strict tools under tool_choice auto: a call the model opens on its own is held to its tool's
schema from its first marker on (a grammar that wakes at the call's start).

Scripted models (tests/support/scripted_model.py) whose own preferred continuation writes a bad
call: one names an argument wrongly (``citty``), the other leaves the JSON unclosed. Without
``strict`` both come back as the model wrote them (the unclosed one a call with the arguments it
got); with it, every dialect answers a call whose
arguments parse and match the schema. Text without a call never wakes the grammar.
"""

from __future__ import annotations

import json

import pytest

from clients import anthropic_sdk, openai_sdk
from conftest import ServerProcess
from scripted_model import write_scripted_gguf

SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris", "Rome"]}},
          "required": ["city"], "additionalProperties": False}
# The model writes the grammar's own opening, then an argument the schema does not have.
WRONG_NAME = ["<tool_call>", "\n", '{"name": "get_weather", "arguments": ', '{"citty": "Paris"}', "}\n",
              "</tool_call>"]
UNCLOSED = ["<tool_call>", '{"name":"get_weather","arguments":{"city":"Paris"}', "</tool_call>"]
ANSWER = "It is sunny in Paris."
THOUGHT = "A <tool_call> is not needed now."     # a marker inside reasoning opens no call
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
AFTER_RESULT = MESSAGES + [
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "sunny"}]


def chat_tools(strict: bool | None) -> list[dict]:
    function = {"name": "get_weather", "parameters": SCHEMA}
    if strict is not None:
        function["strict"] = strict
    return [{"type": "function", "function": function}]


def check_arguments(arguments: str) -> None:
    args = json.loads(arguments)
    assert set(args) == {"city"} and args["city"] in ("Paris", "Rome"), arguments


@pytest.fixture(scope="module")
def wrong_name(models_dir, tmp_path_factory):
    """Step 0: a call with a wrong argument name; after a tool result: reasoning that names the
    call marker, then a plain answer. Drafts on,
    so a prediction of the model's own bad call crosses the point where the grammar wakes."""
    path = write_scripted_gguf(models_dir / "strict-wrong-name.gguf",
                               [WRONG_NAME, ["<think>", THOUGHT, "</think>", ANSWER]])
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1", "--speculative", "ngram",
                        "--draft-max", "8", env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def unclosed(models_dir, tmp_path_factory):
    path = write_scripted_gguf(models_dir / "strict-unclosed.gguf", [UNCLOSED])
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1",
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


def chat_reply(server, strict: bool | None, **options):
    return openai_sdk(server).chat.completions.create(
        model="scripted", messages=MESSAGES, tools=chat_tools(strict), max_tokens=200, **options)


def chat_call(server, strict: bool | None, **options):
    return chat_reply(server, strict, **options).choices[0]


def test_without_strict_the_wrong_argument_name_comes_back_as_written(wrong_name):
    choice = chat_call(wrong_name, None)
    assert choice.finish_reason == "tool_calls"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"citty": "Paris"}


def test_without_strict_the_unclosed_call_comes_back_with_the_arguments_it_got(unclosed):
    # its start went out (streamed, it would have): a call it stays, never its text as content
    choice = chat_call(unclosed, False)
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    assert [(c.function.name, c.function.arguments) for c in choice.message.tool_calls] == [
        ("get_weather", '{"city":"Paris"}')]


@pytest.mark.parametrize("temperature", [0, 0.8])
@pytest.mark.parametrize("model", ["wrong_name", "unclosed"])
def test_strict_chat_call_matches_the_schema(request, model, temperature):
    choice = chat_call(request.getfixturevalue(model), True, temperature=temperature)
    assert choice.finish_reason == "tool_calls", choice.message
    assert not choice.message.content
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    check_arguments(call.function.arguments)


@pytest.mark.parametrize("model", ["wrong_name", "unclosed"])
def test_strict_chat_call_streams_the_same_call(request, model):
    server = request.getfixturevalue(model)
    whole = chat_call(server, True, temperature=0).message.tool_calls[0].function.arguments
    stream = openai_sdk(server).chat.completions.create(
        model="scripted", messages=MESSAGES, tools=chat_tools(True), max_tokens=200, temperature=0, stream=True)
    names, arguments, content, finish = [], "", "", None
    for chunk in stream:
        for delta in chunk.choices[0].delta.tool_calls or []:
            names += [delta.function.name] if delta.function.name else []
            arguments += delta.function.arguments or ""
        content += chunk.choices[0].delta.content or ""
        finish = chunk.choices[0].finish_reason or finish
    assert (names, finish, content) == (["get_weather"], "tool_calls", "")
    assert arguments == whole
    check_arguments(arguments)


def test_strict_text_without_a_call_is_untouched(wrong_name):
    reply = openai_sdk(wrong_name).chat.completions.create(
        model="scripted", messages=AFTER_RESULT, tools=chat_tools(True), max_tokens=200)
    assert reply.choices[0].message.content == ANSWER
    assert reply.choices[0].message.model_extra.get("reasoning_content") == THOUGHT
    assert reply.choices[0].finish_reason == "stop" and not reply.choices[0].message.tool_calls


def test_drafts_across_the_wake_change_nothing(wrong_name):
    """A prediction of the model's own bad call drafts through the marker: the draft's tokens
    after it are rejected by the woken grammar, and the answer is the one plain decoding gives."""
    plain = chat_call(wrong_name, True, temperature=0)
    reply = chat_reply(wrong_name, True, temperature=0,
                       prediction={"type": "content", "content": "".join(WRONG_NAME)})
    predicted = reply.choices[0]
    assert predicted.message.tool_calls[0].function.arguments == plain.message.tool_calls[0].function.arguments
    details = reply.usage.completion_tokens_details
    assert details.accepted_prediction_tokens > 0 and details.rejected_prediction_tokens > 0
    check_arguments(predicted.message.tool_calls[0].function.arguments)


def responses_tools(strict: bool) -> list[dict]:
    return [{"type": "function", "name": "get_weather", "parameters": SCHEMA, "strict": strict}]


@pytest.mark.parametrize("model", ["wrong_name", "unclosed"])
def test_strict_responses_call_matches_the_schema(request, model):
    client = openai_sdk(request.getfixturevalue(model))
    response = client.responses.create(model="scripted", input="Weather in Paris?", tools=responses_tools(True),
                                       max_output_tokens=200, store=False)
    [call] = [item for item in response.output if item.type == "function_call"]
    assert call.name == "get_weather"
    check_arguments(call.arguments)

    done = None
    with client.responses.stream(model="scripted", input="Weather in Paris?", tools=responses_tools(True),
                                 max_output_tokens=200, store=False) as stream:
        for event in stream:
            if event.type == "response.function_call_arguments.done":
                done = event.arguments
    check_arguments(done)


def test_responses_without_strict_keep_the_wrong_name(wrong_name):
    response = openai_sdk(wrong_name).responses.create(
        model="scripted", input="Weather in Paris?", tools=responses_tools(False), max_output_tokens=200,
        store=False)
    [call] = [item for item in response.output if item.type == "function_call"]
    assert json.loads(call.arguments) == {"citty": "Paris"}


@pytest.mark.parametrize("strict", [False, True])
def test_anthropic_strict_tool(unclosed, strict):
    client = anthropic_sdk(unclosed)
    tools = [{"name": "get_weather", "input_schema": SCHEMA, "strict": strict}]
    message = client.messages.create(model="scripted", max_tokens=200, messages=MESSAGES, tools=tools)
    uses = [block for block in message.content if block.type == "tool_use"]
    if not strict:      # the unclosed call, with the arguments it got
        assert message.stop_reason == "tool_use" and [(u.name, u.input) for u in uses] == [
            ("get_weather", {"city": "Paris"})]
        return
    assert message.stop_reason == "tool_use" and [u.name for u in uses] == ["get_weather"]
    check_arguments(json.dumps(uses[0].input))

    with client.messages.stream(model="scripted", max_tokens=200, messages=MESSAGES, tools=tools) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    check_arguments(json.dumps(next(b for b in final.content if b.type == "tool_use").input))


# Llama 3.x writes its calls as a bare object opening the message; an answer in JSON opens one too.
JSON_ANSWER = ['{"', 'answer', '": ', '"', 'sunny', '"}']


@pytest.fixture(scope="module")
def json_answer(models_dir, tmp_path_factory):
    from template_corpus import corpus_templates
    path = write_scripted_gguf(models_dir / "strict-json-answer.gguf", [JSON_ANSWER],
                               real_template=corpus_templates()["meta-llama-Llama-3.1-8B-Instruct"])
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1",
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


@pytest.mark.parametrize("strict", [False, True])
def test_an_answer_in_json_is_no_call_under_strict(json_answer, strict):
    """A `{` opening the message wakes the grammar only once it names a tool: JSON that answers
    the user comes back as the model wrote it, strict or not."""
    choice = chat_call(json_answer, strict, temperature=0)
    assert choice.message.content == "".join(JSON_ANSWER) and not choice.message.tool_calls


# The marker's token runs on past the grammar's opening (Hermes writes a newline after it).
RUN_ON = ['<tool_call>{"name":"get_weather",', '"arguments":', '{"citty":"Paris"}}', "</tool_call>"]
# A family derived from the real GLM-4.6 template: a call in key/value markup, the key misspelt.
GLM_WRONG = ["<tool_call>get_weather", "<arg_key>", "citty", "</arg_key>", "<arg_value>", "Paris",
             "</arg_value>", "</tool_call>"]


@pytest.fixture(scope="module")
def run_on(models_dir, tmp_path_factory):
    from template_corpus import corpus_templates
    path = write_scripted_gguf(models_dir / "strict-run-on.gguf", [RUN_ON],
                               real_template=corpus_templates()["Qwen-Qwen3-0.6B"])
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1",
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def glm_wrong(models_dir, tmp_path_factory):
    from template_corpus import corpus_templates
    path = write_scripted_gguf(models_dir / "strict-glm.gguf", [GLM_WRONG],
                               real_template=corpus_templates()["GLM-4.6"])
    srv = ServerProcess(path, "--model-id", "scripted", "--slots", "1",
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


@pytest.mark.parametrize("model", ["run_on", "glm_wrong"])
def test_without_strict_the_call_comes_back_as_written(request, model):
    choice = chat_call(request.getfixturevalue(model), None, temperature=0)
    assert choice.finish_reason == "tool_calls"
    assert json.loads(choice.message.tool_calls[0].function.arguments) == {"citty": "Paris"}


@pytest.mark.parametrize("model", ["run_on", "glm_wrong"])
def test_strict_holds_a_call_whose_marker_token_runs_on_or_whose_family_is_derived(request, model):
    """Qwen3's real template (Hermes): the marker's token carries `{"name":...` with no newline;
    GLM-4.6's real template: a derived key/value format. Both are held to the schema."""
    server = request.getfixturevalue(model)
    choice = chat_call(server, True, temperature=0)
    assert choice.finish_reason == "tool_calls", choice.message
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    check_arguments(call.function.arguments)
