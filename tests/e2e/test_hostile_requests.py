"""Requests a hostile local client could send: none may take the daemon down or harm others.

Each test names the failure it guards against (issue 15). The server runs in a subprocess,
so an abort inside llama.cpp shows as its exit status, checked when the module ends.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from clients import anthropic_sdk, openai_sdk
from conftest import ServerProcess
from rawhttp import post_json, request
from tinymodel import CHATML_TEMPLATE, NO_EOG, tiny_vocab, token_ids, write_tiny_gguf

from localserve.grammar.limits import MAX_GRAMMAR_OPTIONAL_RUN

TINY_SPECIALS = ["<tool_call>", "</tool_call>", ("<think>", "user_defined"), ("</think>", "user_defined")]  # conftest

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def no_bos_model(models_dir):
    """The conftest's tiny ChatML model, except that it adds no BOS: an empty text is no tokens at all."""
    return write_tiny_gguf(models_dir / "tiny-chatml-no-bos.gguf", chat_template=CHATML_TEMPLATE,
                           special_tokens=TINY_SPECIALS, extra_metadata={"tokenizer.ggml.add_bos_token": False})


@pytest.fixture(scope="module")
def srv(no_bos_model, tmp_path_factory):
    server = ServerProcess(no_bos_model, "--model-id", "tiny", "--slots", "3", "--sample-time-limit", "60",
                           env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield server
    status = server.stop()
    # SIGTERM ends it with 0; an abort inside llama.cpp would have been -6 (SIGABRT) long before
    assert status == 0, f"the server exited with {status}:\n{server.log[-3000:]}"


@pytest.fixture
def oai(srv):
    return openai_sdk(srv, api_key="k")


@pytest.fixture
def claude(srv):
    return anthropic_sdk(srv, api_key="k")


def post(srv, path: str, body: dict, timeout: float = 60):
    return request(srv.port, post_json(path, body), timeout=timeout)


def alive(srv) -> None:
    assert srv.proc.poll() is None, f"the server died with {srv.proc.returncode}:\n{srv.log[-3000:]}"
    assert request(srv.port, b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n").status == 200


def assert_400(resp, param: str, *words: str) -> dict:
    assert resp.status == 400, resp.body
    error = resp.json()["error"]
    assert error["param"] == param, error
    for word in words:
        assert word in error["message"], error
    return error


# ---- item 1: a grammar that can only end, with the end banned ------------------------------------
# llama.cpp throws across the C boundary ("Unexpected empty grammar stack") when made to accept a
# token the grammar forbids: the process aborted with SIGABRT.

def test_chat_grammar_whose_only_next_token_is_banned_eog_ends_cleanly(srv, oai):
    done = oai.chat.completions.create(model="tiny", messages=USER, max_tokens=5,
                                       extra_body={"grammar": 'root ::= "a"', "logit_bias": NO_EOG})
    assert done.choices[0].message.content == "a"
    assert done.choices[0].finish_reason == "stop"
    alive(srv)


def test_json_schema_boolean_at_temperature_zero_with_eog_banned(srv, oai):
    done = oai.chat.completions.create(
        model="tiny", messages=USER, max_tokens=20, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "b", "schema": {"type": "boolean"}}},
        extra_body={"logit_bias": NO_EOG})
    assert done.choices[0].message.content in ("true", "false")
    alive(srv)


def test_sampled_grammar_with_eog_banned_streams_to_a_clean_end(srv, oai):
    chunks = list(oai.chat.completions.create(model="tiny", messages=USER, max_tokens=8, temperature=1.0,
                                              seed=7, stream=True,
                                              extra_body={"grammar": 'root ::= "ab"', "logit_bias": NO_EOG}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "ab"
    assert chunks[-1].choices[0].finish_reason == "stop"
    alive(srv)


def test_responses_text_format_enum_with_eog_banned(srv, oai):
    response = oai.responses.create(
        model="tiny", input="pick", max_output_tokens=20,
        text={"format": {"type": "json_schema", "name": "pick", "schema": {"enum": ["red", "green"]}}},
        extra_body={"logit_bias": NO_EOG})
    assert response.status == "completed"
    assert response.output_text in ('"red"', '"green"')
    alive(srv)


def test_completions_and_messages_grammar_with_eog_banned(srv, oai, claude):
    done = oai.completions.create(model="tiny", prompt="x", max_tokens=5,
                                  extra_body={"grammar": 'root ::= "a"', "logit_bias": NO_EOG})
    assert done.choices[0].text == "a"
    message = claude.messages.create(model="tiny", max_tokens=5, messages=USER,
                                     extra_body={"grammar": 'root ::= "a"', "logit_bias": NO_EOG})
    assert message.content[0].text == "a"
    alive(srv)


def test_bias_banning_every_token_the_grammar_allows_fails_that_job_alone(srv):
    """The grammar wants one token and the bias bans it: a 400 for this job; streams beside it go on."""
    token = token_ids()["a"]
    others = [None] * 3

    def stream(i: int) -> None:
        others[i] = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 40, "stream": True,
                                                         "temperature": 0, "logit_bias": NO_EOG})

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    resp = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 5,
                                              "grammar": f"root ::= <[{token}]>", "logit_bias": {str(token): -100}})
    for thread in threads:
        thread.join()
    assert resp.status == 400, resp.body
    assert resp.json()["error"]["code"] == "no_allowed_token"
    for other in others[:2]:
        assert other.status == 200
        assert b'"finish_reason":"length"' in other.body and b'"error"' not in other.body
    alive(srv)


def test_greedy_bias_banning_the_whole_vocabulary_is_a_400(srv):
    n_vocab = len(tiny_vocab(TINY_SPECIALS))
    resp = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 3, "temperature": 0,
                                              "logit_bias": {str(t): -100 for t in range(n_vocab)}})
    assert resp.status == 400, resp.body
    assert resp.json()["error"]["code"] == "no_allowed_token"
    alive(srv)


# ---- item 2: an empty prompt --------------------------------------------------------------------

def test_empty_completions_prompt_is_a_400_and_harms_no_stream(srv):
    """It raised IndexError in the runtime, which failed every job in the same step."""
    results = [None] * 2

    def stream(i: int) -> None:
        results[i] = post(srv, "/v1/completions", {"prompt": "abc", "max_tokens": 30, "stream": True,
                                                   "logit_bias": NO_EOG})

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    resp = post(srv, "/v1/completions", {"prompt": "", "max_tokens": 5})
    for thread in threads:
        thread.join()
    assert_400(resp, "prompt", "empty")
    for result in results:
        assert result.status == 200 and b"internal error" not in result.body, result.body
    alive(srv)


# ---- item 4: numbers out of range, before anything is queued ------------------------------------

@pytest.mark.parametrize("path,field,value", [
    ("/v1/responses", "max_output_tokens", 1e308),
    ("/v1/chat/completions", "max_tokens", 1e308),
    ("/v1/chat/completions", "max_completion_tokens", 2**40),
    ("/v1/chat/completions", "top_k", 2**40),
    ("/v1/chat/completions", "repeat_last_n", 2**40),
    ("/v1/completions", "max_tokens", 2**31),
    ("/v1/chat/completions", "seed", 2**64),
    ("/v1/messages", "max_tokens", 2**40),
    ("/v1/messages", "top_k", 2**40),
])
def test_huge_counts_are_a_400_naming_the_field(srv, path, field, value):
    body = {"messages": USER, "input": "hi", "prompt": "hi", "model": "tiny", "max_tokens": 4, field: value}
    if path == "/v1/responses":
        body = {"input": "hi", field: value}
    elif path == "/v1/completions":
        body = {"prompt": "hi", field: value}
    resp = post(srv, path, body)
    assert resp.status == 400, resp.body
    error = resp.json()["error"]
    assert field in error["message"], error
    if path != "/v1/messages":
        assert error["param"] == field
    assert not _busy(srv), "a refused request left a job running"
    alive(srv)


def _busy(srv) -> bool:
    slots = request(srv.port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()
    return any(s["busy"] for s in slots["slots"]) or slots["queue_depth"] > 0


# ---- item 7: wrong types and deep nesting are 400s, not 500s ------------------------------------

@pytest.mark.parametrize("calls", [True, 5, "x", [5], [{"function": "f"}]])
def test_tool_calls_of_the_wrong_type_are_a_400(srv, calls):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "user", "content": "again"}]
    resp = post(srv, "/v1/chat/completions", {"messages": messages, "max_tokens": 2})
    assert resp.status == 400, resp.body
    assert resp.json()["error"]["param"].startswith("messages[1].tool_calls")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses", "/apply-template"])
def test_a_call_s_arguments_nested_past_the_body_limit_are_rendered_as_text(srv, path):
    """Arguments are JSON text: 1,000 nested objects parsed (orjson reads 1,024 levels), and the
    template's tojson recursed past Python's limit: a 500 (hostile2). Now they stay text."""
    deep = '{"a":' * 1000 + "1" + "}" * 1000
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": deep}}
    body = {"messages": [*USER, {"role": "assistant", "content": None, "tool_calls": [call]},
                         {"role": "tool", "tool_call_id": "c", "content": "r"}], "max_tokens": 1}
    if path == "/v1/responses":
        body = {"input": [*USER, {"type": "function_call", "call_id": "c", "name": "f", "arguments": deep},
                          {"type": "function_call_output", "call_id": "c", "output": "r"}], "max_output_tokens": 1}
    resp = post(srv, path, body)
    if path == "/apply-template":
        assert resp.status == 200 and '\\"a\\":{' in resp.json()["prompt"], resp.body[:300]
    else:       # the text is longer than the context: refused as any long prompt is
        assert resp.status == 400 and resp.json()["error"]["code"] == "context_length_exceeded", resp.body
    alive(srv)


def test_a_generated_call_nested_past_what_the_writer_takes_gets_empty_arguments(srv):
    """A grammar made the model write a call of 300 nested objects (orjson writes 254): Anthropic's
    and Ollama's whole answers were a 500, Ollama's stream was cut without its last line (hostile2)."""
    text = '<tool_call>\n{"name": "f", "arguments": ' + '{"a":' * 300 + "1" + "}" * 300 + "}\n</tool_call>"
    grammar = "root ::= " + json.dumps(text)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    message = post(srv, "/v1/messages", {"model": "tiny", "messages": USER, "max_tokens": 1900, "grammar": grammar,
                                         "tools": [{"name": "f", "input_schema": {"type": "object"}}]})
    assert message.status == 200 and message.json()["content"][-1]["input"] == {}, message.body[-300:]
    for stream in (False, True):
        chat = post(srv, "/api/chat", {"model": "tiny", "messages": USER, "tools": tools, "stream": stream,
                                       "options": {"grammar": grammar, "num_predict": 1900}})
        lines = [json.loads(line) for line in chat.body.splitlines()]
        assert chat.status == 200 and lines[-1]["done"], chat.body[-300:]
        calls = [c for line in lines for c in line["message"].get("tool_calls", [])]
        assert [c["function"]["arguments"] for c in calls] == [{}]
    alive(srv)


@pytest.mark.parametrize("kwargs", ["x", [{}], 5, True])
def test_apply_template_s_template_kwargs_of_the_wrong_type_are_a_400(srv, kwargs):
    """It called dict() on whatever came: a 500 for a string, a list or a number (hostile2)."""
    resp = post(srv, "/apply-template", {"messages": USER, "chat_template_kwargs": kwargs})
    assert_400(resp, "chat_template_kwargs", "expected an object")


def _nested_arrays(depth: int) -> str:
    return '{"type":"array","items":' * depth + '{"type":"boolean"}' + "}" * depth


def _nested_any_of(depth: int) -> str:
    # JSON text built by hand: the stdlib encoder itself recurses too deep for this
    opening = '{"anyOf":[{"type":"object","properties":{"k":'
    return opening * depth + '{"type":"null"}' + '}},{"type":"integer"}]}' * depth


def _schema_body(schema_text: str) -> bytes:
    return (b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":2,"response_format":'
            b'{"type":"json_schema","json_schema":{"name":"deep","schema":' + schema_text.encode() + b"}}}")


def _nested_objects(depth: int) -> str:
    return '{"type":"object","properties":{"k":' * depth + '{"type":"null"}' + "}}" * depth


# as deep as the body parser takes (1,024 levels): the recursive walks after it are the risk
@pytest.mark.parametrize("schema", [_nested_arrays(300), _nested_objects(500), _nested_any_of(200)],
                         ids=["arrays-300", "objects-500", "anyOf-200"])
def test_very_deep_schemas_are_a_400(srv, schema):
    resp = request(srv.port, post_json("/v1/chat/completions", _schema_body(schema)), timeout=60)
    assert resp.status == 400, resp.body
    assert "MAX_JSON_DEPTH" in resp.json()["error"]["message"]
    alive(srv)


def test_schema_deeper_than_the_schema_limit_names_it(srv):
    resp = request(srv.port, post_json("/v1/chat/completions", _schema_body(_nested_arrays(100))))
    assert_400(resp, "response_format", "64 levels")


def test_schema_refs_chained_deeper_than_the_limit_name_it(srv):
    defs = {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(400)}
    defs["d400"] = {"type": "boolean"}
    resp = post(srv, "/v1/chat/completions", {
        "messages": USER, "max_tokens": 2,
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "refs", "schema": {"$defs": defs, "$ref": "#/$defs/d0"}}}})
    assert_400(resp, "response_format", "levels")


# ---- item 3: what a grammar may cost is bounded before it runs ----------------------------------

def test_nested_repetition_in_a_schema_pattern_is_refused(srv):
    """^(a{0,2000}){0,2000}$ made each token take seconds, then a minute."""
    resp = post(srv, "/v1/chat/completions", {
        "messages": USER, "max_tokens": 3, "logit_bias": NO_EOG,
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "p", "schema": {"type": "string", "pattern": "^(a{0,2000}){0,2000}$"}}}})
    assert_400(resp, "response_format", "MAX_REPEAT_NESTING")


def test_grammar_with_too_many_quantifiers_is_refused(srv):
    """1,600 optional characters in a row took 23 s for 4 tokens."""
    grammar = "root ::= " + " ".join(["[ -~]?"] * 1600)
    resp = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 4, "grammar": grammar})
    assert_400(resp, "grammar", "MAX_GRAMMAR_QUANTIFIERS")


def test_grammar_repeat_count_and_size_limits(srv):
    resp = post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 2, "grammar": 'root ::= "a"{0,5000}'})
    assert_400(resp, "grammar", "MAX_GRAMMAR_REPEAT")
    huge = "root ::= " + " | ".join(f'"{i}"' for i in range(60000))
    resp = post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 2, "grammar": huge})
    assert_400(resp, "grammar", "MAX_GRAMMAR_BYTES")


def test_ordinary_grammars_still_run(srv, oai):
    done = oai.chat.completions.create(model="tiny", messages=USER, max_tokens=30, temperature=0,
                                       extra_body={"grammar": 'root ::= "x" [a-c]{2,4} "!"'})
    text = done.choices[0].message.content
    assert text.startswith("x") and text.endswith("!") and 2 <= len(text) - 2 <= 4


def _rss_mb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):       # the peak: what the request cost at its worst
                return int(line.split()[1]) // 1024
    raise AssertionError("no VmHWM")


def test_repeat_last_n_of_the_whole_history_allocates_no_more_than_the_context(srv):
    """llama.cpp sizes its penalty ring by repeat_last_n: -1 (all) meant 2**31 tokens, 8 GB zeroed."""
    for last_n in (-1, 2**31 - 1):
        resp = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 3, "repeat_penalty": 1.1,
                                                  "repeat_last_n": last_n})
        assert resp.status == 200, resp.body
    assert _rss_mb(srv.proc.pid) < 1024


# ---- item 3: a grammar that is slow anyway fails alone; cancel stops it between tokens ----------
# Flat optional items are ambiguous: llama.cpp's stacks multiply with every character of a candidate
# token. MAX_GRAMMAR_OPTIONAL_RUN of them (the most a client may send) take a good part of a second per
# token on the tiny vocabulary (far more on a real one): the time limit is what bounds that.
SLOW_GRAMMAR = "root ::= " + " ".join(["o"] * MAX_GRAMMAR_OPTIONAL_RUN) + "\no ::= [ -~] |\n"


@pytest.fixture(scope="module")
def strict_srv(no_bos_model, tmp_path_factory):
    server = ServerProcess(no_bos_model, "--model-id", "tiny", "--slots", "3", "--sample-time-limit", "0.05",
                           env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("strict"))})
    yield server
    status = server.stop()
    assert status == 0, f"the server exited with {status}:\n{server.log[-3000:]}"


def test_a_token_slower_than_the_limit_fails_its_job_alone(strict_srv):
    others = [None] * 2

    def stream(i: int) -> None:
        others[i] = post(strict_srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 60, "stream": True,
                                                              "temperature": 0, "logit_bias": NO_EOG})

    threads = [threading.Thread(target=stream, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    slow = post(strict_srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 20, "grammar": SLOW_GRAMMAR,
                                                     "logit_bias": NO_EOG})
    streamed = post(strict_srv, "/v1/completions", {"prompt": "x", "max_tokens": 20, "grammar": SLOW_GRAMMAR,
                                                    "stream": True, "logit_bias": NO_EOG})
    for thread in threads:
        thread.join()
    assert slow.status == 400, slow.body
    assert slow.json()["error"]["code"] == "sampling_too_slow"
    assert "--sample-time-limit" in slow.json()["error"]["message"]
    assert streamed.status == 200 and b"sampling_too_slow" in streamed.body and streamed.body.endswith(b"[DONE]\n\n")
    for other in others:
        assert other.status == 200 and b'"finish_reason":"length"' in other.body, other.body
        assert b'"error"' not in other.body
    assert not _busy(strict_srv)
    metrics = request(strict_srv.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert b"localserve_abandoned_grammar_samples " in metrics.body     # 0 or the threads still finishing
    alive(strict_srv)


def test_cancel_of_a_background_response_frees_its_slot_while_a_grammar_token_is_being_chosen(srv, oai):
    response = oai.responses.create(model="tiny", input="go", background=True, max_output_tokens=400,
                                    extra_body={"grammar": SLOW_GRAMMAR.replace('"o"', "o"),
                                                "logit_bias": NO_EOG})
    deadline = time.monotonic() + 30
    while oai.responses.retrieve(response.id).status == "queued" and time.monotonic() < deadline:
        time.sleep(0.02)
    cancelled = oai.responses.cancel(response.id)
    assert cancelled.status == "cancelled"
    while _busy(srv) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _busy(srv)
    done = oai.chat.completions.create(model="tiny", messages=USER, max_tokens=3)
    assert done.choices[0].finish_reason in ("stop", "length")
    alive(srv)


def test_an_abandoned_grammar_sample_frees_its_sampler_when_llama_cpp_returns(no_bos_model):
    """In-process, real engine: a job that ends while its token is being chosen leaves the thread to
    finish; the sampler is freed then (not under it), and the thread is counted until it has."""
    from localserve.engine.engine import Engine
    from localserve.generation import SamplingParams
    from localserve.runtime.pending_sample import PendingSample, SampleWorker, abandoned_running

    engine = Engine(str(no_bos_model), n_ctx=256, n_seq=1, n_batch=64, threads=1)
    try:
        prompt = engine.tokenize("hello", add_special=False)
        engine.decode([(t, i, 0, i == len(prompt) - 1) for i, t in enumerate(prompt)])
        sampler = engine.new_sampler(SamplingParams(temperature=0, grammar=SLOW_GRAMMAR,
                                                    logit_bias={int(k): v for k, v in NO_EOG.items()}))
        sampler.load(len(prompt) - 1)
        ready = threading.Event()
        worker = SampleWorker()
        sample = PendingSample(sampler, ready.set, worker)
        sample.abandon()
        worker.close()                          # the job ended: the worker ends after this sample
        assert abandoned_running() == 1 or sample.done     # done is set before the count drops
        assert ready.wait(60)
        deadline = time.monotonic() + 5
        while abandoned_running() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert abandoned_running() == 0
        assert sampler.chain is None            # freed by the thread once it was done with it
        worker.thread.join(5)
        assert not worker.thread.is_alive()
    finally:
        engine.close()


def test_a_slow_grammar_job_does_not_hold_back_the_others(srv):
    """Its tokens are chosen off the runtime thread: a plain request started after it, with many more
    tokens to make, is done while it still has tokens to go (in step with it, it would wait ~0.5 s a token)."""
    finished: list[str] = []

    def slow() -> None:
        resp = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 8, "grammar": SLOW_GRAMMAR,
                                                  "logit_bias": NO_EOG}, timeout=120)
        assert resp.status == 200, resp.body
        finished.append("slow")

    thread = threading.Thread(target=slow)
    thread.start()
    deadline = time.monotonic() + 30
    while not _busy(srv) and time.monotonic() < deadline:
        time.sleep(0.01)
    plain = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 100, "temperature": 0,
                                               "logit_bias": NO_EOG})
    finished.append("plain")
    thread.join()
    assert plain.status == 200 and plain.json()["usage"]["completion_tokens"] == 100
    assert finished == ["plain", "slow"]


def test_deeply_nested_grammar_groups_are_refused(srv):
    """llama.cpp's GBNF parser recurses into each group: 30,000 nested parentheses crashed the process."""
    grammar = "root ::= " + "(" * 30000 + '"a"' + ")" * 30000
    resp = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 2, "grammar": grammar})
    assert_400(resp, "grammar", "MAX_GRAMMAR_NESTING")
    alive(srv)


def test_deeply_nested_pattern_groups_are_refused(srv):
    """The pattern translator recursed too (RecursionError, a 500)."""
    pattern = "^" + "(" * 2000 + "a" + ")" * 2000 + "$"
    resp = post(srv, "/v1/chat/completions", {
        "messages": USER, "max_tokens": 2,
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "p", "schema": {"type": "string", "pattern": pattern}}}})
    assert_400(resp, "response_format", "MAX_GRAMMAR_NESTING")
    alive(srv)


def test_a_very_long_property_name_beside_additional_properties_is_a_400(srv):
    """Excluding a property name from the extra keys nests a group per character: RecursionError, a 500."""
    schema = {"type": "object", "properties": {"k" * 3000: {"type": "null"}},
              "additionalProperties": {"type": "null"}}
    resp = post(srv, "/v1/chat/completions", {
        "messages": USER, "max_tokens": 2,
        "response_format": {"type": "json_schema", "json_schema": {"name": "o", "schema": schema}}})
    assert_400(resp, "response_format", "MAX_SCHEMA_KEY_LENGTH")


def test_a_schema_whose_grammar_is_too_big_is_a_400(srv):
    resp = post(srv, "/v1/chat/completions", {
        "messages": USER, "max_tokens": 2,
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "e", "schema": {"enum": list(range(60000))}}}})
    assert resp.status == 400, resp.body
    assert "MAX_GRAMMAR_BYTES" in resp.json()["error"]["message"]


def _forced_custom_tool(srv, lark: str):
    tool = {"type": "custom", "name": "expr", "format": {"type": "grammar", "syntax": "lark", "definition": lark}}
    return post(srv, "/v1/responses", {"input": "hi", "tools": [tool], "tool_choice": "required",
                                       "max_output_tokens": 2})


def test_a_lark_grammar_that_doubles_at_every_rule_is_refused_before_it_is_built(srv):
    """Flattening copies each rule at each use: 30 rules using the next twice asked for 2**30 characters."""
    lark = "start: a0\n" + "".join(f"a{i}: a{i + 1} a{i + 1}\n" for i in range(20)) + 'a20: "x"\n'
    resp = _forced_custom_tool(srv, lark)
    assert_400(resp, "tools", "flattens to more than", "MAX_GRAMMAR_BYTES")
    alive(srv)


@pytest.mark.parametrize("lark", ["start: " + "(" * 3000 + '"x"' + ")" * 3000,
                                  "start: a0\n" + "".join(f"a{i}: a{i + 1}\n" for i in range(300)) + 'a300: "x"\n'],
                         ids=["groups", "rules"])
def test_deeply_nested_lark_grammars_are_a_400(srv, lark):
    """The flattener recursed into each group and rule: RecursionError, a 500."""
    resp = _forced_custom_tool(srv, lark)
    assert_400(resp, "tools", "MAX_GRAMMAR_NESTING")


# ---- make fuzz: a named token whose text begins on the grammar's characters ------------------------
# llama.cpp's grammar check let <think> pass after "<" (the "<" by character, the rest as the named
# token); its accept, by characters only, found no way on and threw "Unexpected empty grammar stack
# after accepting piece": the process aborted.

def test_a_named_token_after_its_own_first_character_is_never_accepted_half_way(srv):
    """Biased to win at once, <think> is refused as the first token: "<" comes first, then <think>."""
    think = token_ids(TINY_SPECIALS)["<think>"]
    for path, body in [("/v1/completions", {"prompt": "x"}), ("/v1/chat/completions", {"messages": USER})]:
        resp = post(srv, path, {**body, "max_tokens": 4, "temperature": 0, "grammar": 'root ::= "<" <think>',
                                "logit_bias": {**NO_EOG, str(think): 100}})
        assert resp.status == 200, resp.body
        choice = resp.json()["choices"][0]
        assert choice.get("text", choice.get("message", {}).get("content")) == "<<think>", choice
        assert resp.json()["usage"]["completion_tokens"] == 2
        alive(srv)


def test_the_named_token_itself_still_runs_where_the_grammar_wants_it_whole(srv):
    think = token_ids(TINY_SPECIALS)["<think>"]
    resp = post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 4, "temperature": 0,
                                         "grammar": 'root ::= "a" <think> "b"', "logit_bias": {str(think): 100}})
    assert resp.status == 200, resp.body
    assert resp.json()["choices"][0]["text"] == "a<think>b"
    alive(srv)


def test_a_negated_token_is_a_400(srv):
    resp = post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 2, "grammar": 'root ::= "a" !<[5]>'})
    assert_400(resp, "grammar", "!<[5]>")
    alive(srv)


def test_left_recursion_that_llama_cpp_misses_is_a_400_before_it_is_set_up(srv):
    """llama.cpp counts a rule as matching nothing only by a literally empty alternative: through
    ("{"* | "a") the recursion went unseen and set-up grew past 3 GB, then threw std::bad_alloc."""
    for grammar in ['root ::= r2\nr2 ::= "gl" | (("{"* | "a") r2) r2',
                    'root ::= "x" r1\nr1 ::= x? (r1 | "y") "z"\nx ::= "w"']:
        resp = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 4, "grammar": grammar})
        assert_400(resp, "grammar", "left-recursive")
        alive(srv)
    done = post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 6, "temperature": 0,
                                         "grammar": 'root ::= "a" root | "b" (x | "") "c"\nx ::= "d"'})
    assert done.status == 200, done.body


def test_a_long_run_of_optional_items_is_a_400_naming_the_limit(srv):
    """Each item that may match nothing is one more way to parse the text so far, and llama.cpp
    checks every token against each: 400 of them took up to 19 s a token (past the time limit,
    the abandoned samples then held grammar requests at 503). Counted through nullable rules too."""
    for grammar in ["root ::= " + "[ -~]? " * (MAX_GRAMMAR_OPTIONAL_RUN + 1),
                    'root ::= "a" ' + "opt " * (MAX_GRAMMAR_OPTIONAL_RUN // 4 + 1) + '\nopt ::= [x]? [y]? [z]? "w"?']:
        resp = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 4, "grammar": grammar})
        assert_400(resp, "grammar", "MAX_GRAMMAR_OPTIONAL_RUN")
        alive(srv)
    done = post(srv, "/v1/completions", {"prompt": "x", "max_tokens": 4, "temperature": 0,
                                         "grammar": "root ::= " + "[a-c]? " * MAX_GRAMMAR_OPTIONAL_RUN + '"."'})
    assert done.status == 200, done.body


def test_a_thousands_deep_chain_of_nullable_rules_is_a_400_not_a_500(srv):
    """Measuring runs of optional items walks the rules one inside the other: 3,000 of them
    (73 KB, under every other limit) went past Python's recursion limit."""
    rules = "\n".join(f'a{i} ::= "x" a{i + 1} | ""' for i in range(3000)) + '\na3000 ::= "y"'
    resp = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 2, "grammar": "root ::= a0\n" + rules})
    assert_400(resp, "grammar", "too deeply")
    alive(srv)


@pytest.mark.parametrize("schema", [
    {"allOf": [{"minimum": "a"}, {"minimum": 1}]},
    {"allOf": [{"type": "object", "required": 5}, {"type": "object"}]},
    {"allOf": [{"type": 5}, {"type": "string"}]},
])
def test_a_schema_keyword_of_the_wrong_type_inside_allof_is_a_400(srv, schema):
    resp = post(srv, "/v1/chat/completions", {"messages": USER, "max_tokens": 2, "response_format": {
        "type": "json_schema", "json_schema": {"name": "s", "schema": schema}}})
    assert_400(resp, "response_format")
    alive(srv)


def test_a_hosted_tool_type_no_header_can_carry_still_gets_its_answer(srv):
    """The ignored-tools header names the client's own tool types: one with a control character
    or a non-Latin-1 letter left the client with no answer at all (the head could not be written)."""
    for kind in ["web_search\x01x", "web_search_ü✓"]:
        resp = post(srv, "/v1/responses", {"input": "hi", "max_output_tokens": 2, "tools": [{"type": kind}]})
        assert resp.status in (200, 400), resp.body
        if resp.status == 200:
            assert resp.header("x-localserve-ignored-tools") == "?"
        alive(srv)
