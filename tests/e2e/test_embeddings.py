"""/v1/embeddings end to end: tiny real models (a BERT-style encoder, decoders with pooling), the
openai SDK with strict validation, vectors compared with the bare engine's (bench/bare_embed.py:
llama.cpp's low-level calls on the same file and tokens)."""

from __future__ import annotations

import base64
import threading

import numpy as np
import pytest

from bench.bare_embed import BareEmbedder, normalised
from clients import openai_sdk
from conftest import ServerProcess, slow_model
from embedmodels import write_pooled_decoder, write_tiny_bert
from rawhttp import RawConnection, post_json, request
from tinymodel import NO_EOG

TEXTS = ["hello world", "the cat sat on the mat", "what is the capital of france?", "a dog and a cat",
         "query: rank 42!"]


def cosine(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


@pytest.fixture(scope="module")
def bert_path(models_dir):
    return write_tiny_bert(models_dir / "bert-mean.gguf", pooling="mean")


@pytest.fixture(scope="module")
def decoder_path(models_dir):
    return write_pooled_decoder(models_dir / "decoder-last.gguf", pooling="last")


@pytest.fixture(scope="module")
def bert_server(bert_path):
    srv = ServerProcess(bert_path, "--model-id", "bert", "--no-store", "--max-embedding-inputs", "300",
                        "--batch-size", "64")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def decoder_server(decoder_path):
    srv = ServerProcess(decoder_path, "--model-id", "dec", "--no-store", "--slots", "2")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def bare_bert(bert_path):
    bare = BareEmbedder(str(bert_path), n_batch=64)
    yield bare
    bare.close()


@pytest.fixture(scope="module")
def bare_decoder(decoder_path):
    bare = BareEmbedder(str(decoder_path))
    yield bare
    bare.close()


CASES = {"bert": ("bert_server", "bare_bert"), "decoder": ("decoder_server", "bare_decoder")}


@pytest.fixture(params=list(CASES))
def pair(request):
    server_name, bare_name = CASES[request.param]
    return request.getfixturevalue(server_name), request.getfixturevalue(bare_name)


def expected(bare: BareEmbedder, sequences: list[list[int]]) -> list[np.ndarray]:
    return [normalised(v) for v in bare.batch(sequences)]


def assert_same(got: list, want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert len(g) == len(w)
        assert cosine(g, w) >= 0.99999
        assert abs(np.linalg.norm(g) - 1.0) < 1e-4      # L2-normalised, as OpenAI's are


@pytest.mark.parametrize("encoding", ["float", None])
@pytest.mark.parametrize("form", ["string", "strings", "tokens", "token_lists"])
def test_vectors_equal_the_bare_engine_for_every_input_form(pair, form, encoding):
    """Through the openai SDK: encoding "float", and none (the SDK then asks for base64 and decodes it)."""
    server, bare = pair
    inputs, sequences = input_form(bare, form)
    # With no encoding_format the SDK asks for base64 and decodes it after validating the body,
    # whose base64 string its own types (a list of floats) forbid: strict validation only for float.
    client = openai_sdk(server, strict=encoding == "float")
    extra = {"encoding_format": encoding} if encoding else {}
    response = client.embeddings.create(model="any", input=inputs, **extra)
    assert [d.index for d in response.data] == list(range(len(sequences)))
    assert_same([d.embedding for d in response.data], expected(bare, sequences))
    n_tokens = sum(len(s) for s in sequences)
    assert response.usage.prompt_tokens == response.usage.total_tokens == n_tokens
    assert response.model in ("bert", "dec")


@pytest.mark.parametrize("form", ["string", "strings", "tokens", "token_lists"])
def test_base64_is_little_endian_float32(pair, form):
    """encoding_format base64 asked outright: the SDK types the field as floats, so raw HTTP reads it."""
    server, bare = pair
    inputs, sequences = input_form(bare, form)
    resp = raw_post(server, "/v1/embeddings", {"model": "any", "input": inputs, "encoding_format": "base64"})
    assert resp.status == 200, resp.body
    data = resp.json()["data"]
    vectors = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in data]
    assert_same(vectors, expected(bare, sequences))


def input_form(bare: BareEmbedder, form: str) -> tuple[object, list[list[int]]]:
    """The `input` of one form, and the token sequences it stands for."""
    token_lists = [bare.tokenize(t) for t in TEXTS]
    return {"string": (TEXTS[1], [token_lists[1]]), "strings": (TEXTS, token_lists),
            "tokens": (token_lists[2], [token_lists[2]]), "token_lists": (token_lists, token_lists)}[form]


def test_dimensions_keeps_the_first_n_and_normalises_again(bert_server, bare_bert):
    client = openai_sdk(bert_server)
    response = client.embeddings.create(model="bert", input=TEXTS[:2], dimensions=16, encoding_format="float")
    full = bare_bert.batch([bare_bert.tokenize(t) for t in TEXTS[:2]])
    assert_same([d.embedding for d in response.data], [normalised(v[:16]) for v in full])


def test_many_inputs_batched_equal_one_at_a_time(bert_server):
    """300 inputs in one call (batches of 64 tokens: many batches, several inputs each), and the same
    as concurrent calls, give the vectors each input gets alone."""
    texts = [f"{TEXTS[i % len(TEXTS)]} {i}" for i in range(300)]
    client = openai_sdk(bert_server)
    together = [d.embedding for d in client.embeddings.create(model="bert", input=texts, encoding_format="float").data]
    alone = {i: client.embeddings.create(model="bert", input=texts[i], encoding_format="float").data[0].embedding for i in range(0, 300, 37)}
    for i, vector in alone.items():
        assert cosine(together[i], vector) >= 0.99999
    chunks: list = [None] * 6

    def call(k: int) -> None:
        chunks[k] = [d.embedding for d in client.embeddings.create(model="bert", input=texts[k * 50:(k + 1) * 50],
                                                       encoding_format="float").data]

    threads = [threading.Thread(target=call, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    concurrent = [v for chunk in chunks for v in chunk]
    assert len(concurrent) == 300
    assert min(cosine(a, b) for a, b in zip(together, concurrent)) >= 0.99999


def test_a_generative_model_embeds_with_the_pooling_asked(tiny_model):
    """A chat model whose GGUF declares no pooling embeds with --pooling mean, and still chats."""
    srv = ServerProcess(tiny_model, "--no-store", "--pooling", "mean")
    bare = BareEmbedder(str(tiny_model), pooling="mean")
    try:
        client = openai_sdk(srv)
        response = client.embeddings.create(model="x", input=TEXTS[:3], encoding_format="float")
        assert_same([d.embedding for d in response.data], expected(bare, [bare.tokenize(t) for t in TEXTS[:3]]))
        chat = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "hi"}], max_tokens=3)
        assert chat.choices[0].message.content is not None
    finally:
        bare.close()
        srv.stop()


def greedy_stream(server, marks: dict, max_tokens: int) -> str:
    """A greedy stream's text; marks['chunks'] counts its chunks as they arrive."""
    client = openai_sdk(server)
    stream = client.chat.completions.create(model="x", messages=[{"role": "user", "content": "tell me a story"}],
                                            max_tokens=max_tokens, temperature=0, logit_bias=NO_EOG, stream=True)
    text = ""
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            marks["chunks"] += 1
    return text


STREAM_TOKENS = 300          # the greedy stream's length
CALL_INPUTS = 800            # the embedding call's inputs, a batch each: well over the stream's tokens


def test_an_embedding_call_leaves_a_running_stream_unchanged(models_dir):
    """A large embedding call while a greedy stream runs: the stream's text is what it is alone, and
    the stream is not held back by it. With --batch-size 16, each of the call's 800 inputs is a batch;
    one batch runs between two decode steps, so the stream's last 290-odd tokens are done long before
    the call's last batch (were the call run whole first, the stream would still be going after it)."""
    path = slow_model(models_dir)
    srv = ServerProcess(path, "--no-store", "--slots", "2", "--pooling", "mean", "--batch-size", "16",
                        "--max-embedding-inputs", str(CALL_INPUTS))
    try:
        alone = greedy_stream(srv, {"chunks": 0}, STREAM_TOKENS)
        marks = {"chunks": 0}
        result: dict = {}
        stream = threading.Thread(target=lambda: result.update(text=greedy_stream(srv, marks, STREAM_TOKENS)))
        stream.start()
        while marks["chunks"] < 5 and stream.is_alive():
            threading.Event().wait(0.01)
        inputs = [[5 + (i + j) % 200 for j in range(16)] for i in range(CALL_INPUTS)]
        # base64, as the openai SDK asks: the vectors written as JSON floats take longer to write than
        # the stream takes to finish, which would hide a call run whole; the limit is a hang check
        resp = request(srv.port, post_json("/v1/embeddings", {"input": inputs, "encoding_format": "base64"}),
                       timeout=180)
        slot_busy = [s["busy"] for s in request(srv.port, b"GET /slots HTTP/1.1\r\nHost: localhost\r\n\r\n").json()["slots"]]
        stream.join(120)
        assert resp.status == 200 and len(resp.json()["data"]) == CALL_INPUTS
        assert len(alone) > STREAM_TOKENS // 3 and result["text"] == alone
        assert not any(slot_busy), "the stream was still running after the embedding call: it was held back"
    finally:
        srv.stop()


def raw_post(server, path: str, body: dict):
    return request(server.port, post_json(path, body), timeout=30)


def error_of(resp) -> dict:
    return resp.json()["error"]


@pytest.mark.parametrize("body, param, says", [
    ({"input": ""}, "input", "empty string"),
    ({"input": []}, "input", "empty array"),
    ({"input": ["ok", ""]}, "input", "input[1] is an empty string"),
    ({"input": [[]]}, "input", "empty"),
    ({"input": ["ok", [5, 6]]}, "input", "mixes"),
    ({"input": 5}, "input", "expected a string"),
    ({"input": [99999]}, "input", "outside the vocabulary"),
    ({"input": [[1, True]]}, "input", "token ids"),
    ({"input": [1, 2.5]}, "input", "token ids (integers)"),
    ({"input": [True]}, "input", "token ids (integers)"),
    ({"input": "ok", "encoding_format": "int8"}, "encoding_format", "float, base64"),
    ({"input": "ok", "dimensions": 0}, "dimensions", ""),
    ({"input": "ok", "dimensions": 65}, "dimensions", ""),
    ({"input": "ok", "truncate": "yes"}, "truncate", "boolean"),
    ({"input": ["x"] * 301}, "input", "--max-embedding-inputs"),
])
def test_bad_inputs_are_400s_naming_the_parameter(bert_server, body, param, says):
    resp = raw_post(bert_server, "/v1/embeddings", {"model": "bert", **body})
    assert resp.status == 400, resp.body
    error = error_of(resp)
    assert error["type"] == "invalid_request_error" and error["param"] == param
    assert says in error["message"]
    assert raw_post(bert_server, "/v1/embeddings", {"input": "still serving"}).status == 200


def test_an_input_longer_than_the_context_is_a_400_with_its_index_or_is_cut(bert_server, bare_bert):
    long_text = " ".join(["hello world"] * 40)          # 80 words: more than --batch-size 64 tokens
    resp = raw_post(bert_server, "/v1/embeddings", {"input": ["short", long_text]})
    assert resp.status == 400
    error = error_of(resp)
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert error["index"] == 1 and error["n_ctx"] == 64 and error["n_prompt_tokens"] > 64
    long_tokens = list(range(5, 5 + 70))
    resp = raw_post(bert_server, "/v1/embeddings", {"input": [long_tokens]})
    assert resp.status == 400 and error_of(resp)["index"] == 0

    resp = raw_post(bert_server, "/v1/embeddings", {"input": ["short", long_text], "truncate": True})
    assert resp.status == 200, resp.body
    body = resp.json()
    tokens = bare_bert.tokenize(long_text)
    cut = tokens[:63] + tokens[-1:]       # the [SEP] the tokenizer ends with stays
    assert body["usage"]["prompt_tokens"] == len(bare_bert.tokenize("short")) + 64
    assert_same([body["data"][1]["embedding"]], expected(bare_bert, [cut]))


def test_an_encoder_serves_no_chat(bert_server):
    resp = raw_post(bert_server, "/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]})
    assert resp.status == 400
    assert "embeddings only" in error_of(resp)["message"]


def test_embeddings_only_keeps_a_generative_model_out_of_chat(decoder_path):
    srv = ServerProcess(decoder_path, "--no-store", "--embeddings-only")
    try:
        for path, body in (("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                           ("/v1/completions", {"prompt": "hi"})):
            resp = raw_post(srv, path, body)
            assert resp.status == 400 and error_of(resp)["param"] == "model"
        assert raw_post(srv, "/v1/embeddings", {"input": "hi"}).status == 200
    finally:
        srv.stop()


def test_metrics_count_embedding_requests_and_tokens(bert_server):
    def counters() -> dict[str, float]:
        text = request(bert_server.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n").body.decode()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                if line.startswith(("localserve_embedding_", "localserve_model_embedding_"))}

    before = counters()
    resp = raw_post(bert_server, "/v1/embeddings", {"input": ["hello world", "the cat"]})
    after = counters()
    tokens = resp.json()["usage"]["prompt_tokens"]
    key = '{endpoint="embeddings"}'
    assert after["localserve_embedding_requests_total" + key] - before.get("localserve_embedding_requests_total" + key, 0) == 1
    assert after["localserve_embedding_inputs_total" + key] - before.get("localserve_embedding_inputs_total" + key, 0) == 2
    assert after["localserve_embedding_tokens_total" + key] - before.get("localserve_embedding_tokens_total" + key, 0) == tokens
    by_model = 'localserve_model_embedding_tokens_total{model="bert",endpoint="embeddings"}'
    assert after[by_model] - before.get(by_model, 0) == tokens


def test_a_client_that_leaves_cancels_the_rest_of_its_call(models_dir):
    """The call's remaining batches are dropped (logged), and the server goes on serving."""
    srv = ServerProcess(slow_model(models_dir), "--no-store", "--pooling", "mean", "--batch-size", "16",
                        "--max-embedding-inputs", "4000")
    try:
        inputs = [[5 + (i + j) % 200 for j in range(16)] for i in range(4000)]
        conn = RawConnection(srv.port, timeout=30)
        conn.send(post_json("/v1/embeddings", {"input": inputs}))
        threading.Event().wait(0.3)     # the call is running (or about to be): either way it is cut short
        conn.close()
        assert srv.wait_log("cancelled embedding job", timeout=30)
        line = next(l for l in srv.lines if "cancelled embedding job" in l)
        done = int(line.split(" after ")[1].split(" of ")[0])
        assert done < 4000
        assert raw_post(srv, "/v1/embeddings", {"input": "still serving"}).status == 200
    finally:
        srv.stop()


def test_an_embedding_model_is_one_more_name_in_the_catalogue(models_dir, bert_path, decoder_path, tiny_model,
                                                              tmp_path):
    """[models.NAME] tables: an encoder, a chat model, and a generative model with its own pooling
    and embeddings-only; `model` picks which embeds, and chat keeps to the models that chat."""
    config = tmp_path / "config.toml"
    config.write_text(f'[models.embed]\npath = "{bert_path}"\n\n'
                      f'[models.chat]\npath = "{tiny_model}"\n\n'
                      f'[models.pooled]\npath = "{decoder_path}"\npooling = "mean"\nembeddings-only = true\n'
                      f'max-embedding-inputs = 2\n')
    srv = ServerProcess(None, "--config", str(config), "--no-store", "--slots", "1")
    bares = {"embed": BareEmbedder(str(bert_path)), "chat": BareEmbedder(str(tiny_model)),
             "pooled": BareEmbedder(str(decoder_path), pooling="mean")}
    try:
        client = openai_sdk(srv)
        for name, bare in bares.items():
            response = client.embeddings.create(model=name, input=TEXTS[:2], encoding_format="float")
            assert response.model == name
            assert_same([d.embedding for d in response.data], expected(bare, [bare.tokenize(t) for t in TEXTS[:2]]))
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        assert raw_post(srv, "/v1/chat/completions", {**chat, "model": "chat"}).status == 200
        for name in ("embed", "pooled"):
            resp = raw_post(srv, "/v1/chat/completions", {**chat, "model": name})
            assert resp.status == 400 and error_of(resp)["code"] == "model_not_supported"
        resp = raw_post(srv, "/v1/embeddings", {"model": "pooled", "input": ["a", "b", "c"]})
        assert resp.status == 400 and "--max-embedding-inputs" in error_of(resp)["message"]
        resp = raw_post(srv, "/v1/embeddings", {"model": "nope", "input": "a"})
        assert resp.status == 404 and error_of(resp)["code"] == "model_not_found"
    finally:
        for bare in bares.values():
            bare.close()
        srv.stop()
