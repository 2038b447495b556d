"""POST /infill on a tiny model with FIM tokens: the real engine, forced middles through the real sampler."""

from __future__ import annotations

import json

import pytest

from conftest import ServerProcess
from procstat import cpu_seconds, memory_bytes
from rawhttp import RawConnection, post_json, request
from sse import sse_data
from tinymodel import CHATML_TEMPLATE, FIM_TOKENS, token_ids, write_tiny_gguf

from localserve.dialects.infill import MAX_EXTRA_FILENAME_CHARS

PRE, SUF, MID, REP, SEP = (FIM_TOKENS[role] for role in ("pre", "suf", "mid", "rep", "sep"))


@pytest.fixture(scope="module")
def fim_server(tmp_path_factory):
    """Three models: repository FIM tokens, plain FIM tokens under the older key names, none."""
    models = tmp_path_factory.mktemp("fim-models")
    write_tiny_gguf(models / "coder.gguf", chat_template=CHATML_TEMPLATE, fim="repo")
    write_tiny_gguf(models / "legacy.gguf", chat_template=CHATML_TEMPLATE, fim="legacy")
    write_tiny_gguf(models / "plain.gguf", chat_template=CHATML_TEMPLATE)
    srv = ServerProcess(None, "--models-dir", str(models), "--slots", "1", "--no-store")
    yield srv
    srv.stop()


def infill(server, body: dict, headers: str = ""):
    return request(server.port, post_json("/infill", {"model": "coder", **body}, headers), timeout=60)


def forced(text: str) -> str:
    return "root ::= " + json.dumps(text)


def test_the_prompt_is_laid_out_with_the_repository_tokens(fim_server):
    resp = infill(fim_server, {"input_prefix": "def f(x):\n", "input_suffix": "\n\nprint(f(1))\n",
                               "prompt": "    ret", "n_predict": 0,
                               "input_extra": [{"filename": "a.py", "text": "A = 1\n", "time": 0},
                                               {"filename": "b.py", "text": "B = 2\n"}]})
    assert resp.status == 200
    answer = resp.json()
    assert answer["prompt"] == (f"<s>{REP}myproject\n{SEP}a.py\nA = 1\n{SEP}b.py\nB = 2\n{SEP}filename\n"
                                f"{PRE}def f(x):\n    ret{SUF}\n\nprint(f(1))\n{MID}")
    assert answer["tokens_predicted"] == 0 and answer["content"] == "" and answer["stop"] is True


def test_suffix_first_order(fim_server):
    answer = infill(fim_server, {"input_prefix": "a", "input_suffix": "z", "prompt": "b", "n_predict": 0,
                                 "spm_infill": True}).json()
    assert answer["prompt"] == f"<s>{SUF}z{PRE}ab{MID}"


def test_the_older_key_names_are_read(fim_server):
    answer = infill(fim_server, {"model": "legacy", "input_prefix": "a", "input_suffix": "z",
                                 "input_extra": [{"filename": "x.py", "text": "X"}], "n_predict": 0}).json()
    assert answer["prompt"] == f"<s>\n\n--- snippet ---\n\nX{PRE}a{SUF}z{MID}"     # no repo/sep tokens


def test_a_forced_middle_comes_back_whole(fim_server):
    resp = infill(fim_server, {"input_prefix": "def f(x):\n    ", "input_suffix": "\n", "grammar": forced("return x"),
                               "n_predict": 32, "temperature": 0})
    answer = resp.json()
    assert answer["content"] == "return x"
    assert answer["stop_type"] == "eos" and answer["stop"] is True and answer["truncated"] is False
    assert answer["tokens_predicted"] > 0
    assert answer["tokens_evaluated"] == answer["timings"]["prompt_n"] + answer["timings"]["cache_n"]
    assert answer["tokens_cached"] == answer["tokens_evaluated"] + answer["tokens_predicted"]


def test_a_forced_middle_streamed(fim_server):
    resp = infill(fim_server, {"input_prefix": "x = ", "input_suffix": "\n", "grammar": forced("[1, 2, 3]"),
                               "stream": True})
    assert resp.header("content-type").startswith("text/event-stream")
    events = sse_data(resp.body)
    pieces, last = events[:-1], events[-1]
    assert pieces and all(e["stop"] is False for e in pieces)
    assert "".join(e["content"] for e in pieces) == "[1, 2, 3]"
    assert last["stop"] is True and last["content"] == "" and last["stop_type"] == "eos"
    assert b"[DONE]" not in resp.body


def test_the_middle_ends_where_the_model_starts_the_suffix(fim_server):
    answer = infill(fim_server, {"input_prefix": "a = ", "input_suffix": "\nb = 2\n",
                                 "grammar": forced(f"1{SUF}\nb = 2\n")}).json()
    assert answer["content"] == "1" and answer["stop_type"] == "eos" and answer["stopping_word"] == ""


def test_the_pad_token_ends_the_middle(fim_server):
    pad = token_ids(list(FIM_TOKENS.values()))[FIM_TOKENS["pad"]]
    answer = infill(fim_server, {"input_prefix": "a = ", "input_suffix": "\n", "logit_bias": {str(pad): 100}}).json()
    assert answer["content"] == "" and answer["stop_type"] == "eos" and answer["tokens_predicted"] == 0


def test_n_predict_ends_the_middle(fim_server):
    answer = infill(fim_server, {"input_prefix": "a", "input_suffix": "b", "grammar": forced("x" * 40),
                                 "n_predict": 3}).json()
    assert answer["stop_type"] == "limit" and answer["tokens_predicted"] == 3


def test_a_warm_up_fills_the_cache_for_the_completion_after_it(fim_server):
    extra = [{"filename": f"m{i}.py", "text": f"def helper_{i}(value):\n    return value * {i}\n"} for i in range(8)]
    warm = infill(fim_server, {"model": "coder", "input_prefix": "", "input_suffix": "", "input_extra": extra,
                               "prompt": "", "n_predict": 0, "samplers": [], "cache_prompt": True,
                               "t_max_prompt_ms": 1, "t_max_predict_ms": 1}).json()
    assert warm["tokens_predicted"] == 0
    answer = infill(fim_server, {"input_prefix": "def main():\n", "input_suffix": "\n", "input_extra": extra,
                                 "prompt": "    hel", "grammar": forced("per_1(2)"), "n_predict": 16}).json()
    assert answer["content"] == "per_1(2)"
    # everything the warm-up put before the suffix and middle tokens is reused
    assert answer["timings"]["cache_n"] == warm["tokens_evaluated"] - 2


def test_n_indent_stops_before_a_line_indented_less(fim_server):
    middle = "total = 0\n    for x in xs:\n        total += x\n    return total\nprint(total)\n"
    answer = infill(fim_server, {"input_prefix": "def f(xs):\n", "input_suffix": "", "prompt": "    ",
                                 "grammar": forced(middle), "n_indent": 4}).json()
    assert answer["content"] == "total = 0\n    for x in xs:\n        total += x\n    return total"
    assert answer["stop_type"] == "limit"
    whole = infill(fim_server, {"input_prefix": "def f(xs):\n", "input_suffix": "", "prompt": "    ",
                                "grammar": forced(middle)}).json()
    assert whole["content"] == middle and whole["stop_type"] == "eos"


def test_t_max_predict_ms_ends_at_a_line_break(fim_server):
    lines = "".join(f"line {i}\n" for i in range(60))
    answer = infill(fim_server, {"input_prefix": "", "input_suffix": "", "grammar": forced(lines),
                                 "t_max_predict_ms": 1}).json()
    assert answer["stop_type"] == "limit"
    assert answer["content"].endswith("\n") and lines.startswith(answer["content"])
    assert len(answer["content"]) < len(lines)


def test_a_model_without_fim_tokens_is_a_400_naming_it(fim_server):
    resp = infill(fim_server, {"model": "plain", "input_prefix": "a", "input_suffix": "b"})
    assert resp.status == 400
    error = resp.json()["error"]
    assert "'plain'" in error["message"] and "fill-in-the-middle" in error["message"]
    assert error["code"] == "model_not_supported"


@pytest.mark.parametrize("body, param", [
    ({"input_suffix": ""}, "input_prefix"),
    ({"input_prefix": ""}, "input_suffix"),
    ({"input_prefix": "", "input_suffix": "", "input_extra": {"text": "x"}}, "input_extra"),
    ({"input_prefix": "", "input_suffix": "", "input_extra": [{"filename": "a"}]}, "input_extra[0]"),
    ({"input_prefix": "", "input_suffix": "", "input_extra": [{"text": "a", "filename": 3}]}, "input_extra[0].filename"),
    ({"input_prefix": "", "input_suffix": "", "prompt": 3}, "prompt"),
    ({"input_prefix": "", "input_suffix": "", "input_extra": [{"text": ""}] * 1025}, "input_extra"),
    ({"input_prefix": "", "input_suffix": "", "n_predict": -2}, "n_predict"),
    ({"input_prefix": "", "input_suffix": "", "n_indent": -1}, "n_indent"),
    ({"input_prefix": "", "input_suffix": "", "samplers": [1]}, "samplers"),
    ({"input_prefix": "", "input_suffix": "", "response_fields": "content"}, "response_fields"),
])
def test_bad_fields_are_400s_naming_them(fim_server, body, param):
    resp = infill(fim_server, body)
    assert resp.status == 400
    assert resp.json()["error"]["param"] == param


def test_a_filename_past_its_cap_is_refused_before_it_is_tokenized(fim_server):
    """A 25 MB filename was tokenized whole: 2.8 s of CPU and 1.39 GB. Now it is a 400 naming it,
    for the cost of reading the body; one at the cap is taken."""
    pid = fim_server.proc.pid
    cpu, peak = cpu_seconds(pid), memory_bytes(pid)["VmHWM"]
    resp = infill(fim_server, {"input_prefix": "", "input_suffix": "", "n_predict": 0,
                               "input_extra": [{"filename": "a.py", "text": "A"},
                                               {"filename": "f" * 25_000_000, "text": "x"}]})
    spent, grown = cpu_seconds(pid) - cpu, memory_bytes(pid)["VmHWM"] - peak
    assert spent < 1.0 and grown < 300 * 1024 * 1024, (spent, grown)
    assert resp.status == 400 and resp.json()["error"]["param"] == "input_extra[1].filename"
    assert "MAX_EXTRA_FILENAME_CHARS" in resp.json()["error"]["message"]
    at_cap = "d/" * (MAX_EXTRA_FILENAME_CHARS // 2 - 2) + "x.py"
    ok = infill(fim_server, {"input_prefix": "", "input_suffix": "", "n_predict": 0,
                             "input_extra": [{"filename": at_cap, "text": "X = 1\n"}]})
    assert ok.status == 200, ok.body


def test_filenames_count_in_the_budget_and_the_oldest_files_give_way(fim_server):
    """Names count with the texts in what the context could hold: 1024 names at the cap (4 MB)
    leave the newest files in the prompt and tokenize no more than a context's worth."""
    pid = fim_server.proc.pid
    name = "n" * (MAX_EXTRA_FILENAME_CHARS - 8)
    extra = [{"filename": f"{name}{i:04d}.py", "text": "old\n"} for i in range(1023)]
    cpu = cpu_seconds(pid)
    answer = infill(fim_server, {"input_prefix": "p", "input_suffix": "s", "n_predict": 0,
                                 "input_extra": [*extra, {"filename": "new.py", "text": "NEW\n"}]}).json()
    assert f"{SEP}new.py\nNEW\n" in answer["prompt"] and f"{name}0000.py" not in answer["prompt"]
    assert cpu_seconds(pid) - cpu < 1.0


def test_a_newer_completion_from_the_same_client_cancels_the_older(fim_server):
    """One slot: the older completion (a long forced middle, streamed) is cancelled by the newer
    request with the same X-Client-Id, which then gets the slot instead of waiting behind it."""
    older = RawConnection(fim_server.port, timeout=60)
    try:
        older.send(post_json("/infill", {"model": "coder", "input_prefix": "", "input_suffix": "", "stream": True,
                                         "grammar": forced("y" * 1500), "n_predict": 1500},
                             "X-Client-Id: editor-test-1\r\n"))
        head = b""
        while b"data: " not in head:
            head += older.sock.recv(4096)       # the older one is generating
        newer = infill(fim_server, {"input_prefix": "", "input_suffix": "", "grammar": forced("ok")},
                       "X-Client-Id: editor-test-1\r\n")
        assert newer.json()["content"] == "ok"
        rest = head
        while b'"stop":true' not in rest:
            data = older.sock.recv(65536)
            assert data, "the older stream ended without its last line"
            rest += data
        last = [line for line in rest.split(b"\n") if b'"stop":true' in line][0]
        assert json.loads(last[len(b"data: "):])["stop_type"] == "none"
    finally:
        older.close()
    assert fim_server.wait_log("superseded by a newer completion from the same client")


def test_another_client_is_not_cancelled(fim_server):
    older = RawConnection(fim_server.port, timeout=60)
    try:
        older.send(post_json("/infill", {"model": "coder", "input_prefix": "", "input_suffix": "",
                                         "grammar": forced("z" * 20), "n_predict": 20},
                             "User-Agent: editor-a\r\n"))
        other = infill(fim_server, {"input_prefix": "", "input_suffix": "", "grammar": forced("ok")},
                       "User-Agent: editor-b\r\n")
        assert other.json()["content"] == "ok"
        assert older.read_response().json()["content"] == "z" * 20
    finally:
        older.close()


def test_the_client_id_header_names_the_client(fim_server):
    """Two User-Agents, one X-Client-Id: the same client."""
    older = RawConnection(fim_server.port, timeout=60)
    try:
        older.send(post_json("/infill", {"model": "coder", "input_prefix": "", "input_suffix": "", "stream": True,
                                         "grammar": forced("w" * 1500), "n_predict": 1500},
                             "User-Agent: one\r\nX-Client-Id: window-7\r\n"))
        head = b""
        while b"data: " not in head:
            head += older.sock.recv(4096)
        newer = infill(fim_server, {"input_prefix": "", "input_suffix": "", "grammar": forced("ok")},
                       "User-Agent: two\r\nX-Client-Id: window-7\r\n")
        assert newer.json()["content"] == "ok"
        rest = head
        while b'"stop":true' not in rest:
            data = older.sock.recv(65536)
            assert data
            rest += data
        assert b'"stop_type":"none"' in rest
    finally:
        older.close()
