"""llama-server's own API end to end on a tiny model: /completion whole and streamed, /props,
/embedding, the input_tokens counts and the slot actions, each checked on the raw wire against
the shapes llama-server's README documents; bad input answered in llama-server's error shape."""

from __future__ import annotations

import json
import os
import re
import struct
import threading

import pytest

from clients import openai_sdk
from conftest import ServerProcess
from embedmodels import write_pooled_decoder
from rawhttp import RawConnection, post_json, request
from sse import sse_data

ERROR_KEYS = {"code", "message", "type"}


@pytest.fixture(scope="module")
def model_path(models_dir):
    # a chat model that also embeds; no EOS after a prompt (a completion continues it)
    return write_pooled_decoder(models_dir / "llama-api.gguf", pooling="last",
                                extra_metadata={"tokenizer.ggml.add_eos_token": False})


@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def server(model_path, slot_dir):
    srv = ServerProcess(model_path, "--model-id", "tiny", "--slots", "2", "--no-store",
                        "--slot-save-path", str(slot_dir))
    yield srv
    srv.stop()


def post(server, path: str, body: dict | bytes, headers: str = ""):
    return request(server.port, post_json(path, body, headers), timeout=60)


def get(server, path: str, headers: str = ""):
    return request(server.port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n{headers}\r\n".encode(), timeout=30)


def forced(text: str) -> str:
    return "root ::= " + json.dumps(text)


def assert_llama_error(resp, status: int, words: str = "") -> dict:
    assert resp.status == status, resp.body
    error = resp.json()["error"]
    assert ERROR_KEYS <= set(error) and error["code"] == status, error
    assert isinstance(error["message"], str) and words.lower() in error["message"].lower(), error
    return error


# ---- /completion ---------------------------------------------------------------------------

def test_a_whole_completion_has_llama_servers_fields(server):
    resp = post(server, "/completion", {"prompt": "Once upon a time", "grammar": forced("there was a cat"),
                                        "n_predict": 32, "temperature": 0})
    assert resp.status == 200, resp.body
    answer = resp.json()
    assert answer["content"] == "there was a cat"
    assert answer["stop"] is True and answer["stop_type"] == "eos" and answer["stopping_word"] == ""
    assert answer["model"] == "tiny" and answer["truncated"] is False
    assert answer["tokens_predicted"] > 0
    assert answer["tokens_evaluated"] == answer["timings"]["prompt_n"] + answer["timings"]["cache_n"]
    assert answer["tokens_cached"] == answer["tokens_evaluated"] + answer["tokens_predicted"]
    assert answer["prompt"].endswith("Once upon a time")
    assert {"prompt_ms", "predicted_ms", "predicted_per_second", "prompt_per_second"} <= set(answer["timings"])
    settings = answer["generation_settings"]
    assert settings["n_predict"] == 32 and settings["temperature"] == 0 and settings["n_ctx"] > 0
    assert answer["tokens"] == [] and "completion_probabilities" not in answer


def test_a_negative_temperature_is_greedy(server):
    answers = {post(server, "/completion", {"prompt": "The", "n_predict": 6, "temperature": t, "seed": seed}
                    ).json()["content"] for t, seed in ((-1, 1), (0, 2), (-0.5, 3))}
    assert len(answers) == 1


def test_a_stop_word_ends_the_completion_and_is_named(server):
    answer = post(server, "/completion", {"prompt": "x", "grammar": forced("one, two. three"),
                                          "stop": [". "]}).json()
    assert answer["content"] == "one, two"
    assert answer["stop_type"] == "word" and answer["stopping_word"] == ". "


def test_n_predict_is_the_limit(server):
    answer = post(server, "/completions", {"prompt": "x", "grammar": forced("a" * 40), "n_predict": 3}).json()
    assert answer["stop_type"] == "limit" and answer["tokens_predicted"] == 3


def test_a_streamed_completion_is_content_lines_then_the_whole_object(server):
    resp = post(server, "/completion", {"prompt": "x = ", "grammar": forced("[1, 2, 3]"), "stream": True})
    assert resp.status == 200 and resp.header("content-type").startswith("text/event-stream")
    events = sse_data(resp.body)
    pieces, last = events[:-1], events[-1]
    assert pieces and all(e["stop"] is False and set(e) >= {"content", "tokens", "index"} for e in pieces)
    assert "".join(e["content"] for e in pieces) == "[1, 2, 3]"
    assert last["stop"] is True and last["stop_type"] == "eos" and last["tokens_predicted"] > 0
    assert "timings" in last and "generation_settings" in last
    assert b"[DONE]" not in resp.body


def test_prompts_as_tokens_and_mixed_are_the_same_prompt(server):
    tokens = post(server, "/tokenize", {"content": "hello world", "add_special": True}).json()["tokens"]
    tail = post(server, "/tokenize", {"content": " again"}).json()["tokens"]
    by_text = post(server, "/completion", {"prompt": "hello world", "n_predict": 0}).json()
    by_ids = post(server, "/completion", {"prompt": tokens + tail, "n_predict": 0}).json()
    mixed = post(server, "/completion", {"prompt": ["hello world", *tail], "n_predict": 0}).json()
    assert by_text["tokens_evaluated"] == len(tokens) and by_text["tokens_predicted"] == 0
    assert by_ids["tokens_evaluated"] == mixed["tokens_evaluated"] == len(tokens) + len(tail)
    assert by_ids["prompt"] == mixed["prompt"] and mixed["prompt"].startswith(by_text["prompt"])
    # a string that does not come first gets no BOS of its own
    late = post(server, "/completion", {"prompt": [*tokens, " again"], "n_predict": 0}).json()
    assert late["tokens_evaluated"] == len(tokens) + len(tail) and late["prompt"] == by_ids["prompt"]


def test_return_tokens_and_probabilities(server):
    answer = post(server, "/completion", {"prompt": "x", "grammar": forced("abc abc"), "return_tokens": True,
                                          "n_probs": 3}).json()
    assert len(answer["tokens"]) == answer["tokens_predicted"]
    assert post(server, "/detokenize", {"tokens": answer["tokens"]}).json()["content"] == "abc abc"
    probs = answer["completion_probabilities"]
    assert "".join(p["token"] for p in probs) == "abc abc"
    assert all(p["logprob"] <= 0 and len(p["top_logprobs"]) == 3 for p in probs)
    post_sampling = post(server, "/completion", {"prompt": "x", "grammar": forced("ab"), "n_probs": 2,
                                                 "post_sampling_probs": True}).json()
    assert all(0 <= p["prob"] <= 1 and len(p["top_probs"]) == 2 for p in post_sampling["completion_probabilities"])


def test_probabilities_carry_their_token_ids(server):
    """llama-server's current completion_probabilities: each token and each alternative with its id."""
    answer = post(server, "/completion", {"prompt": "x", "grammar": forced("abc abc"), "return_tokens": True,
                                          "n_probs": 3, "temperature": 0}).json()
    probs = answer["completion_probabilities"]
    assert [p["id"] for p in probs] == answer["tokens"]
    for p in probs:
        assert set(p) == {"id", "token", "bytes", "logprob", "top_logprobs"}
        assert all(set(alt) == {"id", "token", "bytes", "logprob"} for alt in p["top_logprobs"])
        by_id = {alt["id"]: alt for alt in p["top_logprobs"]}
        assert len(by_id) == 3 and all(type(i) is int for i in by_id)
        if p["id"] in by_id:
            assert by_id[p["id"]]["token"] == p["token"] and by_id[p["id"]]["logprob"] == p["logprob"]
    pieces = sse_data(post(server, "/completion", {"prompt": "x", "grammar": forced("abc abc"), "n_probs": 1,
                                                   "post_sampling_probs": True, "stream": True,
                                                   "temperature": 0}).body)[:-1]
    streamed = [p for piece in pieces for p in piece["completion_probabilities"]]
    assert [p["id"] for p in streamed] == answer["tokens"]
    assert all(set(p["top_probs"][0]) == {"id", "token", "bytes", "prob"} for p in streamed)


def test_id_slot_runs_the_prompt_in_that_slot(server):
    prompt = "The pinned slot's prompt: " + "lorem ipsum dolor sit amet " * 4
    first = post(server, "/completion", {"prompt": prompt, "grammar": forced("ok"), "id_slot": 1}).json()
    assert first["id_slot"] == 1
    held = {s["id"]: s["cached_tokens"] for s in get(server, "/slots").json()["slots"]}
    assert held[1] >= first["tokens_evaluated"]
    # pinned to the other slot, the prompt is computed again there; -1 goes where it is cached
    elsewhere = post(server, "/completion", {"prompt": prompt, "grammar": forced("ok"), "id_slot": 0}).json()
    assert elsewhere["id_slot"] == 0 and elsewhere["timings"]["cache_n"] < 5       # the BOS, perhaps
    anywhere = post(server, "/completion", {"prompt": prompt, "grammar": forced("ok"), "id_slot": -1}).json()
    assert anywhere["timings"]["cache_n"] > 20
    wrapped = post(server, "/completion", {"prompt": prompt + " more", "grammar": forced("ok"), "id_slot": 3,
                                           "stream": True})          # 3 of 2 slots: slot 1, as llama-server wraps
    events = sse_data(wrapped.body)
    assert {e["id_slot"] for e in events} == {1} and events[-1]["timings"]["cache_n"] > 20


def test_several_prompts_are_answered_as_an_array_in_their_order(server):
    tokens = post(server, "/tokenize", {"content": "hello world", "add_special": True}).json()["tokens"]
    body = {"prompt": ["one", tokens, [tokens[0], " and more"]], "grammar": forced("fine"), "n_predict": 8}
    answers = post(server, "/completion", body).json()
    assert isinstance(answers, list) and [a["index"] for a in answers] == [0, 1, 2]
    assert all(a["content"] == "fine" and a["stop"] is True for a in answers)
    alone = [post(server, "/completion", {**body, "prompt": p}).json() for p in body["prompt"]]
    assert [a["tokens_evaluated"] for a in answers] == [a["tokens_evaluated"] for a in alone]
    assert [a["prompt"] for a in answers] == [a["prompt"] for a in alone]
    one = post(server, "/completion", {**body, "prompt": ["one"]}).json()        # an array of one: one object
    assert isinstance(one, dict) and one["content"] == "fine"


def test_several_prompts_stream_with_their_index(server):
    resp = post(server, "/completion", {"prompt": ["first prompt", "second prompt"], "grammar": forced("a b c"),
                                        "stream": True})
    assert resp.status == 200 and resp.header("content-type").startswith("text/event-stream")
    events = sse_data(resp.body)
    for index in (0, 1):
        mine = [e for e in events if e["index"] == index]
        assert "".join(e["content"] for e in mine if not e["stop"]) == "a b c"
        assert mine[-1]["stop"] is True and mine[-1]["stop_type"] == "eos" and "timings" in mine[-1]
        assert [e["stop"] for e in mine].count(True) == 1
    assert b"[DONE]" not in resp.body


def test_many_prompts_leave_another_client_its_turn(server):
    """32 prompts went into the queue at once, and another client's request waited behind all of
    them; now a request holds a window of the queue (2 per slot), and the other request runs
    before most of the 32 have."""
    conn = RawConnection(server.port, timeout=120)
    body = {"prompt": [f"prompt {i}" for i in range(32)], "n_predict": 100, "ignore_eos": True, "stream": True}
    conn.send(post_json("/completion", body))
    seen = bytearray()

    def read():
        while b"0\r\n\r\n" not in seen[-16:] and (data := conn.sock.recv(65536)):
            seen.extend(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while b'"index":0' not in seen:
            assert reader.is_alive(), bytes(seen[:500])
            reader.join(0.01)
        other = post(server, "/completion", {"prompt": "another client", "n_predict": 3})
        assert other.status == 200, other.body
        finished = len(re.findall(rb'"stop":\s*true', bytes(seen)))
        assert finished < 12, finished           # all at once: about 30 ran first
        reader.join(120)
        assert len(re.findall(rb'"stop":\s*true', bytes(seen))) == 32
    finally:
        conn.close()


def test_a_json_schema_holds_the_answer(server):
    answer = post(server, "/completion", {"prompt": "{", "json_schema": {"enum": ["yes", "no"]}}).json()
    assert answer["stop_type"] == "eos" and json.loads(answer["content"]) in ("yes", "no")


def test_response_fields_pick_what_comes_back(server):
    answer = post(server, "/completion", {"prompt": "x", "grammar": forced("hi"),
                                          "response_fields": ["content", "generation_settings/n_predict"]}).json()
    assert answer == {"content": "hi", "generation_settings/n_predict": -1}


def test_sillytavern_text_completion_replayed(server):
    """SillyTavern's llama.cpp backend (textgen-settings.js getTextGenGenerationData, then
    text-completions.js /generate): the whole settings object goes to /completion, with its
    own keys (api_type, api_server...), array logit_bias with `false` bans and an empty grammar."""
    body = {"prompt": "You are a helpful assistant.\nUser: hi\nAssistant:", "max_new_tokens": 8, "max_tokens": 8,
            "temperature": 0.7, "top_p": 0.5, "typical_p": 1, "typical": 1, "sampler_seed": -1, "min_p": 0,
            "repetition_penalty": 1.2, "frequency_penalty": 0, "presence_penalty": 0, "top_k": 40, "skew": 0,
            "min_tokens": 0, "add_bos_token": True, "smoothing_factor": 0, "smoothing_curve": 1,
            "dry_allowed_length": 2, "dry_multiplier": 0, "dry_base": 1.75,
            "dry_sequence_breakers": "[\"\\n\", \":\", \"\\\"\", \"*\"]", "dry_penalty_last_n": 0,
            "max_tokens_second": 0, "samplers": ["top_k", "tfs_z", "typical_p", "top_p", "min_p", "temperature"],
            "stopping_strings": ["\nUser:"], "stop": ["\nUser:"], "truncation_length": 4096, "ban_eos_token": False,
            "skip_special_tokens": True, "top_a": 0, "tfs": 1, "mirostat_mode": 0, "mirostat_tau": 5,
            "mirostat_eta": 0.1, "custom_token_bans": "", "banned_strings": [], "api_type": "llamacpp",
            "api_server": "http://127.0.0.1:8080", "xtc_threshold": 0.1, "xtc_probability": 0, "rep_pen": 1.2,
            "rep_pen_range": 0, "repetition_penalty_range": 0, "seed": -1, "guidance_scale": 1,
            "negative_prompt": "", "grammar_string": "", "repeat_penalty": 1.2, "tfs_z": 1, "repeat_last_n": 0,
            "n_predict": 8, "num_predict": 8, "num_ctx": 4096, "mirostat": 0, "ignore_eos": False,
            "rep_pen_slope": 1, "logit_bias": [[5, False]], "grammar": "", "cache_prompt": True}
    headers = "User-Agent: node-fetch\r\nAccept: */*\r\n"
    whole = post(server, "/completion", body, headers)
    assert whole.status == 200, whole.body
    assert whole.json()["tokens_predicted"] <= 8 and whole.json()["stop"] is True
    streamed = post(server, "/completion", {**body, "stream": True}, headers)
    assert streamed.status == 200, streamed.body
    # its front end reads data.content from each line, and data.error.message for an error
    events = sse_data(streamed.body)
    assert all("error" not in e for e in events) and events[-1]["stop"] is True


def test_sillytavern_status_props_and_token_count_replayed(server):
    """Its connection check (GET /v1/models with a JSON Content-Type), its template match (GET
    /props with no headers: it hashes chat_template after `.endsWith`), its token counter
    (POST /tokenize {"content"}: the count is tokens.length) and its slot info (GET /slots)."""
    models = get(server, "/v1/models", "Content-Type: application/json\r\n").json()
    assert [m["id"] for m in models["data"]] == ["tiny"]
    assert isinstance(get(server, "/props").json()["chat_template"], str)
    counted = post(server, "/tokenize", {"content": "hello there"}, "User-Agent: node-fetch\r\n").json()
    assert isinstance(counted["tokens"], list) and counted["tokens"]
    assert get(server, "/slots").status == 200


def test_ignore_eos_runs_to_n_predict(server):
    eos_text = get(server, "/props").json()["eos_token"]
    eos = post(server, "/tokenize", {"content": eos_text}).json()["tokens"][-1]
    body = {"prompt": "x", "n_predict": 6, "logit_bias": [[eos, 100]]}
    assert post(server, "/completion", body).json()["stop_type"] == "eos"
    answer = post(server, "/completion", {**body, "ignore_eos": True}).json()
    assert answer["stop_type"] == "limit" and answer["tokens_predicted"] == 6


def test_the_openai_sdk_is_unaffected(server):
    client = openai_sdk(server)
    assert [m.id for m in client.models.list().data] == ["tiny"]
    text = client.completions.create(model="tiny", prompt="x", max_tokens=4, extra_body={"grammar": forced("ok")})
    assert text.choices[0].text == "ok"


def test_chat_completions_are_answered_without_the_v1_as_llama_server_answers_them(server):
    """DSPy's ollama_chat/ models, and the openai SDK given the server's bare address, post to
    /chat/completions: the same Chat Completion, errors in OpenAI's shape."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "grammar": forced("ok")}
    whole = post(server, "/chat/completions", body)
    assert whole.status == 200, whole.body
    answer = whole.json()
    assert answer["object"] == "chat.completion" and answer["choices"][0]["message"]["content"] == "ok"
    streamed = post(server, "/chat/completions", {**body, "stream": True})
    assert streamed.body.rstrip().endswith(b"data: [DONE]")
    chunks = sse_data(streamed.body)
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == "ok"
    refused = post(server, "/chat/completions", {"model": "tiny", "messages": []})
    assert refused.status == 400 and refused.json()["error"]["param"] == "messages"


# ---- /props ----------------------------------------------------------------------------------

def test_props_describe_the_model(server, model_path):
    props = get(server, "/props").json()
    settings = props["default_generation_settings"]
    assert settings["n_ctx"] > 0 and settings["params"]["temperature"] == pytest.approx(0.8)
    assert props["total_slots"] == 2
    assert props["model_path"] == model_path.name          # the file's name: no directory of the operator's
    assert props["modalities"] == {"vision": False, "audio": False, "video": False}
    assert "<|im_start|>" in props["chat_template"] and props["chat_template_caps"]["supports_system_role"] is True
    assert props["build_info"].startswith("localserve") and props["is_sleeping"] is False
    assert get(server, "/props?model=anything").json()["model_alias"] == "tiny"


def test_zed_reads_the_context_and_capabilities(server):
    """Zed's llama.cpp provider (crates/llama_cpp): GET /v1/models, then /props?model=<id> for each
    loaded entry with a `status` (router mode), with Accept: application/json."""
    headers = "Accept: application/json\r\nAuthorization: Bearer none\r\n"
    entries = get(server, "/v1/models", headers).json()["data"]
    assert entries[0]["status"]["value"] == "loaded"
    assert entries[0]["architecture"]["input_modalities"] == ["text"]
    props = get(server, "/props?model=" + "tiny", headers).json()
    assert props["default_generation_settings"]["n_ctx"] == entries[0]["meta"]["n_ctx"]
    caps = props["chat_template_caps"]
    assert isinstance(caps["supports_tools"], bool) and isinstance(caps["supports_tool_calls"], bool)
    assert props["modalities"]["vision"] is False


def test_props_cannot_be_changed(server):
    assert_llama_error(post(server, "/props", {}), 501, "cannot be changed")


# ---- /embedding, /reranking -----------------------------------------------------------------

def test_embedding_in_llama_servers_shape(server):
    resp = post(server, "/embedding", {"content": ["hello world", "a cat"]})
    assert resp.status == 200, resp.body
    rows = resp.json()
    assert [r["index"] for r in rows] == [0, 1] and all(len(r["embedding"]) == 1 for r in rows)
    oai = post(server, "/v1/embeddings", {"input": ["hello world"]}).json()["data"][0]["embedding"]
    assert rows[0]["embedding"][0] == pytest.approx(oai, abs=1e-5)
    raw = post(server, "/embeddings", {"content": "hello world", "embd_normalize": -1}).json()[0]["embedding"][0]
    norm = sum(x * x for x in raw) ** 0.5
    assert [x / norm for x in raw] == pytest.approx(oai, abs=1e-5)
    taxicab = post(server, "/embedding", {"content": "hello world", "embd_normalize": 1}).json()[0]["embedding"][0]
    assert sum(abs(x) for x in taxicab) == pytest.approx(1.0, abs=1e-4)


def test_embedding_with_input_answers_as_openai(server):
    body = post(server, "/embedding", {"input": "hello"}).json()
    assert body["object"] == "list" and body["data"][0]["object"] == "embedding"


# ---- input_tokens --------------------------------------------------------------------------

def test_chat_input_tokens_count_what_the_chat_would_run(server):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello there"}]
    for path in ("/v1/chat/completions/input_tokens", "/chat/completions/input_tokens"):
        counted = post(server, path, {"model": "tiny", "messages": messages}).json()
        assert counted["object"] == "response.input_tokens"
        ran = post(server, "/v1/chat/completions", {"model": "tiny", "messages": messages, "max_tokens": 1}).json()
        assert counted["input_tokens"] == ran["usage"]["prompt_tokens"]


def test_responses_input_tokens_through_the_openai_sdk(server):
    client = openai_sdk(server)
    counted = client.responses.input_tokens.count(model="tiny", input="hello there", instructions="be brief")
    assert counted.object == "response.input_tokens"
    ran = client.responses.create(model="tiny", input="hello there", instructions="be brief", max_output_tokens=16,
                                  store=False)
    assert counted.input_tokens == ran.usage.input_tokens


# ---- slots ---------------------------------------------------------------------------------

def test_a_slot_saved_erased_and_restored_keeps_its_prompt(server, slot_dir):
    prompt = "The slot test prompt: " + "lorem ipsum dolor sit amet " * 6
    first = post(server, "/completion", {"prompt": prompt, "grammar": forced("done"), "id_slot": 0}).json()
    slots = get(server, "/slots").json()["slots"]
    seq = next(s["id"] for s in slots if s["cached_tokens"] >= first["tokens_evaluated"])
    saved = post(server, f"/slots/{seq}?action=save", {"filename": "story.bin"})
    assert saved.status == 200, saved.body
    saved = saved.json()
    assert saved["id_slot"] == seq and saved["filename"] == "story.bin" and saved["n_saved"] >= first["tokens_evaluated"]
    assert saved["n_written"] == (slot_dir / "story.bin").stat().st_size and "save_ms" in saved["timings"]
    # SillyTavern's erase sends {"filename": undefined}, that is {}
    erased = post(server, f"/slots/{seq}?action=erase", {}).json()
    assert erased == {"id_slot": seq, "n_erased": saved["n_saved"]}
    for other in range(2):                      # nothing holds the prompt now
        if other != seq:
            post(server, f"/slots/{other}?action=erase", {})
    restored = post(server, f"/slots/{seq}?action=restore", {"filename": "story.bin"}).json()
    assert restored["n_restored"] == saved["n_saved"] and restored["n_read"] == saved["n_written"]
    again = post(server, "/completion", {"prompt": prompt, "grammar": forced("done")}).json()
    assert again["timings"]["cache_n"] == first["tokens_evaluated"] - 1


@pytest.mark.parametrize("name", ["../escape.bin", "a/b.bin", "..", ".hidden", "x\\y", "", "a..b"])
def test_a_slot_file_name_is_a_plain_name(server, name):
    assert_llama_error(post(server, "/slots/0?action=save", {"filename": name}), 400, "filename")


def test_slot_actions_refuse_what_they_cannot_do(server):
    assert_llama_error(post(server, "/slots/0?action=fly", {}), 400, "action")
    assert_llama_error(post(server, "/slots/7?action=erase", {}), 400, "slot")
    assert_llama_error(post(server, "/slots/0?action=restore", {"filename": "nothing-here.bin"}), 404, "no slot file")


def test_a_file_that_is_no_slot_file_is_refused(server, slot_dir):
    (slot_dir / "junk.bin").write_bytes(b"not a slot")
    assert_llama_error(post(server, "/slots/0?action=restore", {"filename": "junk.bin"}), 400, "not a slot file")


def rewritten(data: bytes, tokens) -> bytes:
    """A slot file with its token list replaced (the header's n_tokens with it), its state kept."""
    start = len(b"LSSLOT1\n") + 4
    (size,) = struct.unpack_from("<I", data, start - 4)
    header = json.loads(data[start:start + size])
    state = data[start + size + 4 * header["n_tokens"]:]
    header = json.dumps({**header, "n_tokens": len(tokens)}).encode()
    return data[:start - 4] + struct.pack("<I", len(header)) + header + struct.pack(f"<{len(tokens)}i", *tokens) + state


def test_a_slot_file_whose_tokens_are_not_its_state_is_refused(server, slot_dir):
    """A file edited or put together by hand: tokens that are not what its KV state holds (more,
    fewer, outside the vocabulary) would be a 500 at the next decode there, or a cache that
    answers for a prompt it never saw. A 400; the slot empty; both slots keep serving."""
    assert post(server, "/completion", {"prompt": "the tokens of a saved slot", "n_predict": 2, "id_slot": 1}).status == 200
    saved = post(server, "/slots/1?action=save", {"filename": "tokens.bin"}).json()
    data = (slot_dir / "tokens.bin").read_bytes()
    (size,) = struct.unpack_from("<I", data, 8)
    tokens = list(struct.unpack_from(f"<{saved['n_saved']}i", data, 12 + size))
    for name, edited in (("more.bin", tokens + [5] * 50), ("fewer.bin", tokens[:2]),
                         ("vocab.bin", [10**8] + tokens[1:])):
        (slot_dir / name).write_bytes(rewritten(data, edited))
        assert_llama_error(post(server, "/slots/1?action=restore", {"filename": name}), 400,
                           "vocabulary" if name == "vocab.bin" else "positions")
        again = post(server, "/completion", {"prompt": tokens + [5] * 50, "n_predict": 2, "id_slot": 1})
        assert again.status == 200, again.body
    assert post(server, "/completion", {"prompt": "still serving", "n_predict": 2, "id_slot": 0}).status == 200


def test_more_prompts_than_the_queue_holds_is_a_400_not_a_503(tiny_model):
    """A 503 says retry; a request of more prompts than --max-queue would be refused on every try."""
    small = ServerProcess(tiny_model, "--slots", "1", "--max-queue", "3", "--no-store")
    try:
        refused = assert_llama_error(post(small, "/completion", {"prompt": ["a"] * 4, "n_predict": 1}), 400, "at most 3")
        assert refused["param"] == "prompt"
        assert len(post(small, "/completion", {"prompt": ["a"] * 3, "n_predict": 1}).json()) == 3
    finally:
        small.stop()


@pytest.mark.parametrize("slot", ["%C2%B2", "9" * 5000, "007" * 3])
def test_a_slot_id_of_odd_digits_is_a_400(server, slot):
    """'²' is a digit to str.isdigit() but not to int(), and 5000 digits pass int()'s limit: both were 500s."""
    assert_llama_error(post(server, f"/slots/{slot}?action=erase", {}), 400, "slot id")


@pytest.mark.parametrize("name", ["a" * 241, "é" * 121])
def test_a_slot_file_name_too_long_for_the_disk_is_a_400(server, name):
    """A name whose temp file name would pass NAME_MAX was an ENAMETOOLONG 500."""
    assert_llama_error(post(server, "/slots/0?action=save", {"filename": name}), 400, "240 bytes")


def test_the_longest_slot_file_name_saves(server, slot_dir):
    name = "é" * 120                                # 240 bytes
    assert post(server, "/slots/0?action=save", {"filename": name}).status == 200
    assert (slot_dir / name).is_file() and not [p for p in slot_dir.iterdir() if p.name.startswith(".")]


def test_a_directory_in_the_save_path_is_a_400_to_save_and_restore(server, slot_dir):
    (slot_dir / "adir").mkdir()
    assert_llama_error(post(server, "/slots/0?action=save", {"filename": "adir"}), 400, "directory")
    assert_llama_error(post(server, "/slots/0?action=restore", {"filename": "adir"}), 400, "not a regular file")


def test_a_fifo_or_device_in_the_save_path_is_never_read(server, slot_dir):
    """A FIFO held the request's thread forever; a link to /dev/zero read until memory ran out."""
    os.mkfifo(slot_dir / "pipe.bin")
    (slot_dir / "zero.bin").symlink_to("/dev/zero")
    for name in ("pipe.bin", "zero.bin"):
        assert_llama_error(post(server, "/slots/0?action=restore", {"filename": name}), 400, "not a regular file")


def test_a_link_planted_at_the_temp_name_is_not_written_through(server, slot_dir, tmp_path):
    """The old fixed temp name '.NAME.part' was opened with open(): a link there wrote outside the directory."""
    outside = tmp_path / "victim.txt"
    outside.write_text("keep me")
    (slot_dir / ".planted.bin.part").symlink_to(outside)
    assert post(server, "/slots/0?action=save", {"filename": "planted.bin"}).status == 200
    assert outside.read_text() == "keep me" and (slot_dir / "planted.bin").is_file()


# ---- bad input: a clear 4xx in llama-server's shape ------------------------------------------

@pytest.mark.parametrize("path, body, status, words", [
    ("/completion", {}, 400, "prompt"),
    ("/completion", {"prompt": 5}, 400, "prompt"),
    ("/completion", {"prompt": []}, 400, "empty"),
    ("/completion", {"prompt": ["a", {"x": 1}]}, 400, "prompt"),
    ("/completion", {"prompt": ["a", "x y " * 3000]}, 400, "context"),
    ("/completion", {"prompt": ["a"] * 65}, 400, "at most 64"),
    ("/completion", {"prompt": "x", "id_slot": -2}, 400, "id_slot"),
    ("/completion", {"prompt": [999999]}, 400, "vocabulary"),
    ("/completion", {"prompt": "x", "n_predict": "ten"}, 400, "n_predict"),
    ("/completion", {"prompt": "x", "n_probs": 99}, 400, "n_probs"),
    ("/completion", {"prompt": "x", "json_schema": {"type": "object"}, "grammar": "root ::= \"a\""}, 400, "not both"),
    ("/completion", {"prompt": "x", "json_schema": "{}"}, 400, "json_schema"),
    ("/completion", {"prompt": "x y " * 3000}, 400, "context"),
    ("/completions", {"prompt": "x", "lora": [{"id": 0, "scale": 1}]}, 400, "lora"),
    ("/embedding", {}, 400, "content"),
    ("/embedding", {"content": 5}, 400, "content"),
    ("/embeddings", {"content": "x", "embd_normalize": "two"}, 400, "embd_normalize"),
    ("/reranking", {"query": "q", "documents": ["a"]}, 400, "rank"),
    ("/v1/chat/completions/input_tokens", {"messages": "hi"}, 400, "messages"),
    ("/v1/responses/input_tokens", {"input": 5}, 400, "input"),
])
def test_bad_input_is_a_clear_4xx(server, path, body, status, words):
    error = assert_llama_error(post(server, path, body), status, words)
    if words == "context":
        assert error["type"] == "exceed_context_size_error" and error["n_ctx"] > 0


def test_a_body_that_is_no_json_is_a_400_in_llama_servers_shape(server):
    assert_llama_error(post(server, "/completion", b"{not json"), 400, "json")


def test_an_error_after_the_stream_began_is_a_data_line(server):
    """A grammar of one token, and that token banned: sampling fails once the head is out, and
    the stream ends with llama-server's error object on a data line."""
    token = post(server, "/tokenize", {"content": "a"}).json()["tokens"][-1]
    resp = post(server, "/completion", {"prompt": "x", "grammar": f"root ::= <[{token}]>", "stream": True,
                                        "logit_bias": [[token, False]]})
    assert resp.status == 200 and resp.header("content-type").startswith("text/event-stream")
    last = sse_data(resp.body)[-1]
    assert last["error"]["code"] == 400 and last["error"]["type"] == "invalid_request_error"
    assert "no token is allowed" in last["error"]["message"]


# ---- slots under several API keys --------------------------------------------------------------

@pytest.fixture(scope="module")
def keyed(model_path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("keyed-slots")
    keys = folder / "keys"
    keys.write_text("alice-key\nbob-key\n")
    srv = ServerProcess(model_path, "--model-id", "tiny", "--slots", "1", "--no-store", "--api-key-file", str(keys),
                        "--slot-save-path", str(folder / "saved"))
    srv.slot_dir = folder / "saved"
    yield srv
    srv.stop()


def test_a_slot_is_its_keys_own(keyed):
    """One key's prompt in a slot is empty to another key (issue 44's scopes): another key saves
    nothing of it, erases nothing of it, and cannot restore the first key's file."""
    alice, bob = "Authorization: Bearer alice-key\r\n", "Authorization: Bearer bob-key\r\n"
    prompt = "alice's secret prompt " * 4
    assert post(keyed, "/completion", {"prompt": prompt, "grammar": forced("ok")}, alice).status == 200
    assert post(keyed, "/slots/0?action=save", {"filename": "bob.bin"}, bob).json()["n_saved"] == 0
    assert post(keyed, "/slots/0?action=erase", {}, bob).json()["n_erased"] == 0
    saved = post(keyed, "/slots/0?action=save", {"filename": "alice.bin"}, alice).json()
    assert saved["n_saved"] > 0
    assert_llama_error(post(keyed, "/slots/0?action=restore", {"filename": "alice.bin"}, bob), 404, "no slot file")
    assert post(keyed, "/slots/0?action=restore", {"filename": "alice.bin"}, alice).json()["n_restored"] == \
        saved["n_saved"]


def test_two_keys_saving_one_name_keep_two_files(keyed):
    """Bob's save under the name Alice used replaced her file (and a restore told Bob the name
    was taken): each key's files are its own, and a file moved into another key's folder is
    still refused to that key."""
    alice, bob = "Authorization: Bearer alice-key\r\n", "Authorization: Bearer bob-key\r\n"
    assert post(keyed, "/completion", {"prompt": "alice's other prompt " * 4, "grammar": forced("ok")},
                alice).status == 200
    saved = post(keyed, "/slots/0?action=save", {"filename": "same.bin"}, alice).json()
    assert saved["n_saved"] > 0
    assert post(keyed, "/slots/0?action=save", {"filename": "same.bin"}, bob).json()["n_saved"] == 0
    assert post(keyed, "/slots/0?action=restore", {"filename": "same.bin"}, alice).json()["n_restored"] == \
        saved["n_saved"]
    folders = {p.parent for p in (keyed.slot_dir).rglob("same.bin")}
    assert len(folders) == 2 and keyed.slot_dir not in folders
    alice_file = next(p for p in keyed.slot_dir.rglob("same.bin") if p.stat().st_size == saved["n_written"])
    bob_file = next(p for p in keyed.slot_dir.rglob("same.bin") if p != alice_file)
    bob_file.write_bytes(alice_file.read_bytes())
    assert_llama_error(post(keyed, "/slots/0?action=restore", {"filename": "same.bin"}, bob), 400, "another API key")
