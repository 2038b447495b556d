"""/v1/rerank (and /rerank) end to end on a tiny BERT-style model with a ranking head, scores and
order compared with the bare engine's (bench/bare_embed.py) for the same pair tokens."""

from __future__ import annotations

import pytest

from bench.bare_embed import BareEmbedder
from conftest import ServerProcess
from embedmodels import CLS_ID, RERANK_TEMPLATE, SEP_ID, write_tiny_bert, write_tiny_qwen3_reranker
from rawhttp import post_json, request

QUERY = "what is the capital of france?"
DOCUMENTS = ["paris is the capital of france", "the cat sat on the mat", "a dog", "hello world",
             "france and paris", "rank the query 42"]


@pytest.fixture(scope="module")
def rank_path(models_dir):
    return write_tiny_bert(models_dir / "bert-rank.gguf", pooling="rank", seed=3)


@pytest.fixture(scope="module")
def rank_server(rank_path):
    srv = ServerProcess(rank_path, "--model-id", "reranker", "--no-store", "--batch-size", "64",
                        "--max-embedding-inputs", "8")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def bare(rank_path):
    engine = BareEmbedder(str(rank_path), n_batch=64)
    yield engine
    engine.close()


def post(server, body: dict, path: str = "/v1/rerank"):
    return request(server.port, post_json(path, body), timeout=30)


def bare_scores(bare: BareEmbedder, query: str, documents: list[str]) -> list[float]:
    """[CLS] query [SEP] document [SEP], as a BERT cross-encoder reads a pair."""
    q = bare.tokenize(query, add_special=False, parse_special=False)
    pairs = [[CLS_ID] + q + [SEP_ID] + bare.tokenize(d, add_special=False, parse_special=False) + [SEP_ID]
             for d in documents]
    return [float(v[0]) for v in bare.embed(pairs)], sum(len(p) for p in pairs)


@pytest.mark.parametrize("path", ["/v1/rerank", "/rerank"])
def test_scores_and_order_equal_the_bare_engine(rank_server, bare, path):
    resp = post(rank_server, {"model": "reranker", "query": QUERY, "documents": DOCUMENTS}, path)
    assert resp.status == 200, resp.body
    body = resp.json()
    want, n_tokens = bare_scores(bare, QUERY, DOCUMENTS)
    order = sorted(range(len(DOCUMENTS)), key=lambda i: -want[i])
    assert [r["index"] for r in body["results"]] == order
    for result in body["results"]:
        assert abs(result["relevance_score"] - want[result["index"]]) < 1e-4
        assert "document" not in result
    assert len(set(round(s, 4) for s in want)) == len(want)        # distinct scores: the order says something
    assert body["usage"] == {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
    assert body["model"] == "reranker"


def test_top_n_and_return_documents(rank_server, bare):
    docs = [DOCUMENTS[0], {"text": DOCUMENTS[1]}, DOCUMENTS[2], {"text": DOCUMENTS[3]}]
    texts = [d if isinstance(d, str) else d["text"] for d in docs]
    resp = post(rank_server, {"query": QUERY, "documents": docs, "top_n": 2, "return_documents": True})
    assert resp.status == 200, resp.body
    want, _ = bare_scores(bare, QUERY, texts)
    best = sorted(range(4), key=lambda i: -want[i])[:2]
    results = resp.json()["results"]
    assert [r["index"] for r in results] == best
    assert [r["document"] for r in results] == [{"text": texts[i]} for i in best]


def test_a_document_longer_than_the_context_is_a_400_or_is_cut(rank_server, bare):
    long_doc = " ".join(["hello world"] * 40)
    resp = post(rank_server, {"query": QUERY, "documents": ["a dog", long_doc]})
    assert resp.status == 400
    error = resp.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "documents" and error["index"] == 1
    resp = post(rank_server, {"query": QUERY, "documents": ["a dog", long_doc], "truncate": True})
    assert resp.status == 200, resp.body
    q = bare.tokenize(QUERY, add_special=False, parse_special=False)
    room = 64 - len(q) - 3
    cut = [CLS_ID] + q + [SEP_ID] + bare.tokenize(long_doc, add_special=False, parse_special=False)[:room] + [SEP_ID]
    want = float(bare.batch([cut])[0][0])
    got = {r["index"]: r["relevance_score"] for r in resp.json()["results"]}
    assert abs(got[1] - want) < 1e-4


@pytest.mark.parametrize("body, param, says", [
    ({"documents": ["a"]}, "query", "non-empty string"),
    ({"query": "", "documents": ["a"]}, "query", "non-empty string"),
    ({"query": "q"}, "documents", "expected an array"),
    ({"query": "q", "documents": []}, "documents", "empty array"),
    ({"query": "q", "documents": ["a", ""]}, "documents", "documents[1]"),
    ({"query": "q", "documents": [{"txt": "a"}]}, "documents", "documents[0]"),
    ({"query": "q", "documents": ["a"] * 9}, "documents", "--max-embedding-inputs"),
    ({"query": "q", "documents": ["a"], "top_n": 0}, "top_n", ""),
    ({"query": "q", "documents": ["a"], "return_documents": "yes"}, "return_documents", "boolean"),
])
def test_bad_requests_are_400s_naming_the_parameter(rank_server, body, param, says):
    resp = post(rank_server, body)
    assert resp.status == 400, resp.body
    error = resp.json()["error"]
    assert error["param"] == param and says in error["message"]
    assert post(rank_server, {"query": "q", "documents": ["still serving"]}).status == 200


def test_embeddings_from_a_reranker_are_a_400(rank_server):
    resp = request(rank_server.port, post_json("/v1/embeddings", {"input": "hello"}))
    assert resp.status == 400 and "reranker" in resp.json()["error"]["message"]


def test_a_model_without_a_ranking_head_says_so(models_dir):
    path = write_tiny_bert(models_dir / "bert-cls.gguf", pooling="cls")
    srv = ServerProcess(path, "--no-store")
    try:
        resp = post(srv, {"query": "q", "documents": ["a"]})
        assert resp.status == 400
        error = resp.json()["error"]
        assert error["param"] == "model" and "no ranking head" in error["message"]
    finally:
        srv.stop()


def test_a_decoder_reranker_fills_its_rerank_template(models_dir):
    """Qwen3-Reranker style: the GGUF's rerank template with {query} and {document} filled in,
    the last token pooled through a two-label head llama.cpp softmaxes; the score is label 0's."""
    path = write_tiny_qwen3_reranker(models_dir / "qwen3-rerank.gguf", seed=5)
    srv = ServerProcess(path, "--no-store")
    engine = BareEmbedder(str(path))
    try:
        resp = post(srv, {"query": QUERY, "documents": DOCUMENTS})
        assert resp.status == 200, resp.body
        pairs = [engine.tokenize(RERANK_TEMPLATE.replace("{query}", QUERY).replace("{document}", d))
                 for d in DOCUMENTS]
        want = [float(v[0]) for v in engine.embed(pairs)]
        results = resp.json()["results"]
        assert [r["index"] for r in results] == sorted(range(len(DOCUMENTS)), key=lambda i: -want[i])
        for r in results:
            assert abs(r["relevance_score"] - want[r["index"]]) < 1e-5
        assert resp.json()["usage"]["prompt_tokens"] == sum(len(p) for p in pairs)
    finally:
        engine.close()
        srv.stop()


def test_a_query_longer_than_the_context_is_a_400(rank_server):
    resp = post(rank_server, {"query": "hello world " * 100, "documents": ["a"]})
    assert resp.status == 400 and resp.json()["error"]["param"] == "query"
