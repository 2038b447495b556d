"""Speculative decoding on the real engine: the output is what plain decoding gives.

Two servers on the same tiny model, one with --speculative off: every test compares their
outputs. Drafts come from the prompt lookup (a prompt with repeated text) or from OpenAI's
`prediction` set to the plain server's own answer, which makes every draft right and so puts
long accepted runs where a test needs them (a stop string, max_tokens). After every request
each slot's KV sequence holds exactly the tokens the slot says it holds: no draft outlives
its rejection.
"""

from __future__ import annotations

import collections
import math
import time

import pytest

from clients import openai_sdk
from conftest import TINY_MODEL_SPECIAL_TOKENS, ServerProcess
from rawhttp import RawConnection, run_concurrently, post_json, request, request_id_of
from promtext import parse
from tinymodel import CHATML_TEMPLATE, NO_EOG, byte_token_id, tiny_vocab, write_tiny_gguf

PROMPTS = ["alpha beta gamma alpha beta gamma alpha beta gamma alpha beta",
           "def f(x): return x + 1\ndef g(y): return y + 2\n" * 3 + "def h(z):",
           "the quick brown fox", "one two three four five six seven"]


# Random weights choose byte tokens that are no UTF-8 text: banned, so that an answer's text is its
# tokens' bytes and can be given back as a prediction.
TEXT_ONLY = {**NO_EOG, **{str(byte_token_id(b)): -100 for b in range(256)}}


@pytest.fixture(scope="module")
def plain(tiny_model):
    srv = ServerProcess(tiny_model, "--speculative", "off", "--slots", "4", "--no-store", "--tool-syntax", "hermes")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def spec(tiny_model):
    srv = ServerProcess(tiny_model, "--speculative", "ngram", "--draft-max", "8", "--slots", "4", "--no-store",
                        "--tool-syntax", "hermes")
    yield srv
    srv.stop()


def complete(port: int, prompt: str, **extra) -> dict:
    body = {"prompt": prompt, "max_tokens": 60, "temperature": 0, "logit_bias": TEXT_ONLY, **extra}
    resp = request(port, post_json("/v1/completions", body), timeout=60)
    assert resp.status == 200, resp.body
    return resp.json()


def text_of(answer: dict) -> str:
    return answer["choices"][0]["text"]


def drafts(answer: dict) -> tuple[int, int]:
    """(accepted, rejected) of every draft the server made for the answer (its timings)."""
    timings = answer["timings"]
    return timings["draft_n_accepted"], timings["draft_n"] - timings["draft_n_accepted"]


def prediction_drafts(answer: dict) -> tuple[int, int]:
    """(accepted, rejected) of the drafts the request's own prediction made (OpenAI's usage)."""
    details = answer["usage"]["completion_tokens_details"]
    return details["accepted_prediction_tokens"], details["rejected_prediction_tokens"]


def assert_no_kv_leak(port: int) -> None:
    """Every slot's KV sequence holds as many positions as the tokens the slot says it caches."""
    state = request(port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()
    for slot in state["slots"]:
        assert not slot["busy"]
        assert slot["kv_positions"] == slot["cached_tokens"], state


def assert_cache_holds_what_was_emitted(port: int, answer: dict) -> None:
    """The slot that served answer holds its prompt and every emitted token but the last (never
    decoded): nothing of a draft past the end stays."""
    usage = answer["usage"]
    held = usage["prompt_tokens"] + usage["completion_tokens"] - 1
    state = request(port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()
    assert held in [slot["cached_tokens"] for slot in state["slots"]], (held, state)


def test_greedy_output_is_the_same_with_drafts_one_stream(plain, spec):
    accepted = rejected = 0
    for prompt in PROMPTS:
        want = complete(plain.port, prompt)
        got = complete(spec.port, prompt)
        assert text_of(got) == text_of(want) and text_of(want)
        assert got["usage"]["completion_tokens"] == want["usage"]["completion_tokens"]
        a, r = drafts(got)
        accepted, rejected = accepted + a, rejected + r
        assert prediction_drafts(got) == (0, 0)        # no prediction sent: the n-gram drafts are the server's
        assert_no_kv_leak(spec.port)
    assert drafts(want) == (0, 0)
    assert accepted > 0 and rejected > 0       # both ways through the verification were taken


def test_greedy_output_is_the_same_with_drafts_four_streams(plain, spec):
    want = [text_of(complete(plain.port, p, max_tokens=80)) for p in PROMPTS]
    got = run_concurrently(lambda p: complete(spec.port, p, max_tokens=80), [(p,) for p in PROMPTS])
    assert [text_of(g) for g in got] == want
    assert sum(drafts(g)[0] for g in got) > 0
    assert_no_kv_leak(spec.port)


def test_prediction_drafts_are_accepted_and_change_nothing(plain, spec):
    want = complete(plain.port, PROMPTS[2])
    got = complete(spec.port, PROMPTS[2], prediction={"type": "content", "content": text_of(want)})
    assert text_of(got) == text_of(want)
    accepted, rejected = prediction_drafts(got)
    unaided = drafts(complete(spec.port, PROMPTS[2]))[0]
    assert accepted >= 30 and accepted >= unaided + 10     # a right prediction is taken, most of it
    assert got["timings"]["draft_n_accepted"] >= accepted  # the timings count the n-gram drafts too
    assert got["timings"]["draft_n"] >= accepted + rejected
    assert_no_kv_leak(spec.port)


def test_a_wrong_prediction_changes_nothing(plain, spec):
    want = complete(plain.port, PROMPTS[3])
    wrong = text_of(want)[:20] + "zzzz" + text_of(want)[20:]
    got = complete(spec.port, PROMPTS[3], prediction={"type": "content", "content": [{"type": "text", "text": wrong}]})
    assert text_of(got) == text_of(want)
    assert prediction_drafts(got)[1] > 0
    assert_no_kv_leak(spec.port)


def test_stop_string_inside_an_accepted_run(plain, spec):
    full = text_of(complete(plain.port, PROMPTS[0]))
    stop = full[10:13]
    assert full.find(stop) >= 6
    want = complete(plain.port, PROMPTS[0], stop=[stop])
    got = complete(spec.port, PROMPTS[0], stop=[stop], prediction={"type": "content", "content": full})
    assert text_of(got) == text_of(want) == full[:full.find(stop)]
    assert got["choices"][0]["finish_reason"] == "stop"
    # the prediction's first 8 tokens were drafted at once and the stop is among them
    assert drafts(got)[0] > 0
    assert got["usage"]["completion_tokens"] == want["usage"]["completion_tokens"]
    assert_no_kv_leak(spec.port)
    assert_cache_holds_what_was_emitted(spec.port, got)


@pytest.mark.parametrize("max_tokens", [1, 2, 5, 11])
def test_max_tokens_reached_inside_an_accepted_run(plain, spec, max_tokens):
    full = text_of(complete(plain.port, PROMPTS[1]))
    want = complete(plain.port, PROMPTS[1], max_tokens=max_tokens)
    got = complete(spec.port, PROMPTS[1], max_tokens=max_tokens, prediction={"type": "content", "content": full})
    assert text_of(got) == text_of(want)
    assert got["usage"]["completion_tokens"] == max_tokens
    assert got["choices"][0]["finish_reason"] == "length"
    assert_no_kv_leak(spec.port)
    assert_cache_holds_what_was_emitted(spec.port, got)


def test_grammar_output_is_the_same_with_drafts(plain, spec):
    grammar = 'root ::= ([ab] [ab] [ab] " ")+'       # where a space may go depends on every token before
    want = complete(plain.port, PROMPTS[0], grammar=grammar, max_tokens=40)
    assert text_of(want) and set(text_of(want)) <= set("ab ")
    got = complete(spec.port, PROMPTS[0], grammar=grammar, max_tokens=40,
                   prediction={"type": "content", "content": text_of(want)})
    assert text_of(got) == text_of(want)
    assert drafts(got)[0] > 0
    wrong = complete(spec.port, PROMPTS[0], grammar=grammar, max_tokens=40,
                     prediction={"type": "content", "content": "ba ab " * 10})    # wrong: spaces misplaced
    assert text_of(wrong) == text_of(want)
    assert_no_kv_leak(spec.port)


def test_tool_call_end_marker_inside_an_accepted_run(plain, spec):
    call = '<tool_call>{\\"name\\": \\"get_time\\", \\"arguments\\": {\\"zone\\": \\"UTC\\"}}</tool_call>'
    grammar = f'root ::= "{call}" " and then a long tail of text that is never generated"'
    tools = [{"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"type": "string"}}}}}]
    forced = call.replace("\\", "") + " and then a long tail of text that is never generated"
    body = {"messages": [{"role": "user", "content": "time?"}], "tools": tools, "temperature": 0,
            "max_tokens": 200, "grammar": grammar, "parallel_tool_calls": False}
    want = request(plain.port, post_json("/v1/chat/completions", body), timeout=60).json()
    got = request(spec.port, post_json("/v1/chat/completions", {
        **body, "prediction": {"type": "content", "content": forced}}), timeout=60).json()
    assert want["choices"][0]["finish_reason"] == got["choices"][0]["finish_reason"] == "tool_calls"
    calls = [c["function"] for c in got["choices"][0]["message"]["tool_calls"]]
    assert calls == [c["function"] for c in want["choices"][0]["message"]["tool_calls"]]
    assert calls[0]["name"] == "get_time"
    assert got["usage"]["completion_tokens"] == want["usage"]["completion_tokens"]
    assert got["usage"]["completion_tokens_details"]["accepted_prediction_tokens"] > 0
    assert_no_kv_leak(spec.port)
    assert_cache_holds_what_was_emitted(spec.port, got)


def test_logprobs_match_token_by_token(plain, spec):
    want = complete(plain.port, PROMPTS[2], logprobs=2, max_tokens=20)
    got = complete(spec.port, PROMPTS[2], logprobs=2, max_tokens=20,
                   prediction={"type": "content", "content": text_of(want)})
    assert got["choices"][0]["logprobs"]["tokens"] == want["choices"][0]["logprobs"]["tokens"]
    assert got["choices"][0]["logprobs"]["token_logprobs"] == pytest.approx(
        want["choices"][0]["logprobs"]["token_logprobs"], abs=1e-3)
    assert drafts(got)[0] > 0


def test_cancel_mid_run_frees_the_slot(plain, spec):
    full = text_of(complete(plain.port, PROMPTS[1], max_tokens=200))
    conn = RawConnection(spec.port)
    conn.send(post_json("/v1/completions", {
        "prompt": PROMPTS[1], "max_tokens": 100000, "temperature": 0, "logit_bias": TEXT_ONLY, "stream": True,
        "prediction": {"type": "content", "content": full * 50}}))
    request_id = request_id_of(conn.sock.recv(4096))
    conn.close()
    assert spec.wait_cancelled(request_id, "client went away")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        state = request(spec.port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()
        if not any(s["busy"] for s in state["slots"]):
            break
        time.sleep(0.05)
    assert_no_kv_leak(spec.port)
    assert text_of(complete(spec.port, PROMPTS[1])) == text_of(complete(plain.port, PROMPTS[1]))


# Sharp enough that the prediction (the greedy answer) is often what is sampled (some 55 drafted
# tokens accepted over the seeds); some twenty-five (position, token) outcomes still occur.
TEMPERATURE = 0.2


def test_sampled_tokens_are_distributed_as_without_drafts(plain, spec):
    """Over many seeds, the tokens sampled at each position have the same distribution with drafts
    (a chi-square test of homogeneity), and drafts were accepted along the way."""
    prompt = PROMPTS[0]
    guide = text_of(complete(plain.port, prompt, max_tokens=6))
    counts = {"plain": collections.Counter(), "spec": collections.Counter()}
    accepted = 0
    for seed in range(120):
        for name, srv in (("plain", plain), ("spec", spec)):
            answer = complete(srv.port, prompt, max_tokens=6, temperature=TEMPERATURE, seed=seed, logprobs=0,
                              **({"prediction": {"type": "content", "content": guide}} if name == "spec" else {}))
            tokens = answer["choices"][0]["logprobs"]["tokens"]
            counts[name].update((i, t) for i, t in enumerate(tokens))
            accepted += drafts(answer)[0]
    assert accepted > 40
    statistic, dof = chi_square(counts["plain"], counts["spec"])
    assert dof >= 3
    assert chi_square_p(statistic, dof) > 0.001, (statistic, dof)


def chi_square(a: collections.Counter, b: collections.Counter) -> tuple[float, int]:
    """Two-sample chi-square statistic over the categories; rare ones (expected < 5) pooled."""
    total_a, total_b = sum(a.values()), sum(b.values())
    cells, pooled = [], [0, 0]
    for key in set(a) | set(b):
        if (a[key] + b[key]) * min(total_a, total_b) / (total_a + total_b) < 5:
            pooled[0] += a[key]
            pooled[1] += b[key]
        else:
            cells.append((a[key], b[key]))
    if sum(pooled):
        cells.append(tuple(pooled))
    statistic = 0.0
    for x, y in cells:
        row = x + y
        for observed, total in ((x, total_a), (y, total_b)):
            expected = row * total / (total_a + total_b)
            statistic += (observed - expected) ** 2 / expected
    return statistic, len(cells) - 1


def chi_square_p(statistic: float, dof: int) -> float:
    """Upper tail of the chi-square distribution (Wilson-Hilferty's normal approximation)."""
    z = ((statistic / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def test_sdk_reports_prediction_usage_and_metrics_show_acceptance(plain, spec):
    want = complete(plain.port, PROMPTS[2])
    client = openai_sdk(spec)
    answer = client.completions.create(model="tiny", prompt=PROMPTS[2], max_tokens=60, temperature=0,
                                       logit_bias=TEXT_ONLY, extra_body={"prediction": {"type": "content",
                                                                                     "content": text_of(want)}})
    assert answer.choices[0].text == text_of(want)
    assert answer.usage.completion_tokens_details.accepted_prediction_tokens > 0
    chat = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=10, temperature=0, logit_bias=NO_EOG,
                                          prediction={"type": "content", "content": "hello there"})
    assert chat.usage.completion_tokens_details.rejected_prediction_tokens is not None
    metrics = request(spec.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").body.decode()
    rate = [line for line in metrics.splitlines() if line.startswith("localserve_draft_acceptance_rate ")]
    assert rate and 0 < float(rate[0].split()[1]) <= 1


@pytest.mark.parametrize("prediction, param", [
    ("text", "prediction"),
    ({"type": "file", "content": "x"}, "prediction"),
    ({"type": "content", "content": 5}, "prediction.content"),
    ({"type": "content", "content": [{"type": "image", "url": "x"}]}, "prediction.content"),
])
def test_bad_prediction_is_400_naming_it(spec, prediction, param):
    resp = request(spec.port, post_json("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "hi"}], "prediction": prediction}))
    assert resp.status == 400
    assert resp.json()["error"]["param"] == param


def test_draft_model_gives_the_same_output(tiny_model, plain):
    srv = ServerProcess(tiny_model, "--draft-model", str(tiny_model), "--slots", "2", "--no-store")
    try:
        assert "speculative" not in srv.log or "draft" in srv.log
        for prompt in PROMPTS[:2]:
            want = complete(plain.port, prompt)
            got = complete(srv.port, prompt)
            assert text_of(got) == text_of(want)
            assert drafts(got)[0] > 30          # the same weights draft: nearly every draft is right
            assert_no_kv_leak(srv.port)
        together = run_concurrently(lambda p: complete(srv.port, p), [(p,) for p in PROMPTS[:2]])
        assert [text_of(t) for t in together] == [text_of(complete(plain.port, p)) for p in PROMPTS[:2]]
    finally:
        srv.stop()


def write_other_vocab(path):
    """The tiny model's vocabulary with one token's text changed: the same size, another vocabulary."""
    tokens = [text for text, _, _ in tiny_vocab(TINY_MODEL_SPECIAL_TOKENS)]
    tokens[300] += "\u00e9"
    return write_tiny_gguf(path, chat_template=CHATML_TEMPLATE, special_tokens=TINY_MODEL_SPECIAL_TOKENS,
                           extra_metadata={"tokenizer.ggml.tokens": tokens})


def test_draft_model_with_another_vocabulary_stops_the_start(tiny_model, models_dir):
    other = write_other_vocab(models_dir / "other-vocab.gguf")
    srv = ServerProcess(tiny_model, "--draft-model", str(other), wait=False)
    assert srv.proc.wait(60) == 2
    srv.stop()
    lines = [line for line in srv.lines if line.strip() and " INFO " not in line]
    assert len(lines) == 1 and "vocabulary" in lines[0], srv.log


def test_a_draft_model_with_a_padded_vocabulary_drafts_only_shared_tokens(tiny_model, models_dir, plain):
    """Model families pad the vocabulary by size (Qwen2.5 0.5B: 151936 tokens, 14B: 152064): such a pair
    drafts, and what comes out is what the model alone writes."""
    padded = write_tiny_gguf(models_dir / "padded-vocab.gguf", chat_template=CHATML_TEMPLATE,
                             special_tokens=TINY_MODEL_SPECIAL_TOKENS + [f"<pad_{i}>" for i in range(5)])
    srv = ServerProcess(tiny_model, "--speculative", "draft", "--draft-model", str(padded))
    try:
        want = complete(plain.port, PROMPTS[1])
        got = complete(srv.port, PROMPTS[1])
        assert text_of(got) == text_of(want)
        assert sum(drafts(got)) > 0
    finally:
        srv.stop()


# ---- several models: speculation is each model's own setting --------------------------------

def mapped(pid: int, path) -> bool:
    """Whether the process still maps the file (llama.cpp mmaps a model's weights until it frees it)."""
    return str(path) in open(f"/proc/{pid}/maps").read()


def test_each_model_drafts_as_its_table_says_and_frees_its_draft_model_with_it(tiny_model, models_dir, tmp_path):
    drafter = tmp_path / "drafter.gguf"
    drafter.write_bytes(tiny_model.read_bytes())
    other = write_other_vocab(tmp_path / "other-vocab.gguf")
    config = tmp_path / "config.toml"
    config.write_text(f'[models.drafted]\npath = "{tiny_model}"\ndraft-model = "{drafter}"\n\n'
                      f'[models.plain]\npath = "{tiny_model}"\nspeculative = "off"\n\n'
                      f'[models.mismatched]\npath = "{tiny_model}"\ndraft-model = "{other}"\n')
    srv = ServerProcess(None, "--config", str(config), "--slots", "2", "--no-store")
    try:
        want = complete(srv.port, PROMPTS[1], model="plain")
        assert drafts(want) == (0, 0)
        got = complete(srv.port, PROMPTS[1], model="drafted")
        assert text_of(got) == text_of(want)
        assert drafts(got)[0] > 30          # the same weights draft: nearly every draft is right
        assert mapped(srv.proc.pid, drafter)
        metrics = parse(request(srv.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").body.decode())
        # usage counts the draft a job finished inside, as /metrics does
        assert metrics.value("localserve_model_draft_accepted_tokens_total", model="drafted") == drafts(got)[0]
        assert metrics.value("localserve_model_draft_tokens_total", model="drafted") == sum(drafts(got))
        assert metrics.value("localserve_model_draft_tokens_total", model="plain") == 0
        assert 0 < metrics.value("localserve_model_draft_acceptance_rate", model="drafted") <= 1
        # a draft model with another vocabulary fails its model's load, naming both files; the rest serve on
        for _ in range(2):
            resp = request(srv.port, post_json("/v1/completions", {"model": "mismatched", "prompt": "hi"}))
            error = resp.json()["error"]
            assert resp.status == 500 and error["code"] == "model_load_failed"
            assert other.name in error["message"] and tiny_model.name in error["message"]
            assert str(tmp_path) not in error["message"]        # files by name: the log has the paths
            assert "vocabulary" in error["message"]
        assert text_of(complete(srv.port, PROMPTS[1], model="drafted")) == text_of(want)
        unload = request(srv.port, post_json("/models/unload", {"model": "drafted"}))
        assert unload.status == 200 and unload.json()["state"] == "unloaded"
        assert not mapped(srv.proc.pid, drafter)        # the draft model went with its model
    finally:
        srv.stop()
