"""GET /metrics: the metric types, their Prometheus text, and counters moving on a real server."""

from __future__ import annotations

import threading
import time

import pytest

from conftest import ServerProcess
from localserve.ops.metrics import ServerMetrics
from localserve.ops.prometheus import Counter, Histogram, Registry
from localserve.generation import GenerationOutput, Timings
from promtext import parse
from rawhttp import RawConnection, post_json, request
from tinymodel import NO_EOG, token_ids

# One llama.cpp thread: the tiny model needs no more, and on a busy 2-core box two threads that
# spin-wait on each other make a decode step up to 200x slower (seen: 300 tokens in 70 s, not 0.1 s).
BASE_FLAGS = ("--no-store", "--threads", "1")
GET_METRICS = b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n"


# ---- the metric types, no server -----------------------------------------------

def test_counter_with_labels_renders_one_sample_per_label_set():
    registry = Registry()
    requests = registry.counter("x_requests_total", "Requests.", ("endpoint", "status"))
    requests.inc(endpoint="/a", status=200)
    requests.inc(2, endpoint="/a", status=200)
    requests.inc(endpoint="/b", status=404)
    scrape = parse(registry.render())
    assert scrape.families["x_requests_total"].type == "counter"
    assert scrape.value("x_requests_total", endpoint="/a", status="200") == 3
    assert scrape.total("x_requests_total") == 4
    with pytest.raises(ValueError):
        requests.inc(-1, endpoint="/a", status=200)
    with pytest.raises(ValueError):
        requests.inc(endpoint="/a")                     # a label missing


def test_histogram_buckets_are_cumulative_with_sum_and_count():
    registry = Registry()
    hist = registry.histogram("x_seconds", "Time.", (0.1, 1, 10))
    for value in (0.05, 0.1, 0.5, 5, 50):
        hist.observe(value)
    text = registry.render()
    scrape = parse(text)
    assert [scrape.value("x_seconds_bucket", le=le) for le in ("0.1", "1", "10", "+Inf")] == [2, 3, 4, 5]
    assert scrape.value("x_seconds_count") == 5
    assert scrape.value("x_seconds_sum") == pytest.approx(55.65)
    assert text.index("# HELP x_seconds") < text.index("# TYPE x_seconds") < text.index("x_seconds_bucket")


def test_label_values_and_help_are_escaped():
    registry = Registry()
    counter = registry.counter("x_total", 'Help with \\ and\na newline.', ("path",))
    counter.inc(path='a"b\\c\nd')
    text = registry.render()
    assert '# HELP x_total Help with \\\\ and\\na newline.' in text
    assert parse(text).value("x_total", path='a"b\\c\nd') == 1


def test_gauges_are_read_at_scrape_time_and_skipped_when_unknown():
    level = {"now": 3}
    registry = Registry()
    registry.gauge("x_level", "Level.", lambda: level["now"])
    registry.gauge("x_unknown", "Not known yet.", lambda: None)
    assert parse(registry.render()).value("x_level") == 3
    level["now"] = 7
    scrape = parse(registry.render())
    assert scrape.value("x_level") == 7
    assert not scrape.families["x_unknown"].samples


def test_the_test_parser_never_reads_a_missing_gauge_or_name_as_zero():
    registry = Registry()
    registry.gauge("x_unknown", "Not known yet.", lambda: None)
    registry.counter("x_total", "Count.", ("kind",))
    scrape = parse(registry.render())
    assert scrape.value("x_total", kind="a") == 0           # a labelled counter not moved yet
    with pytest.raises(KeyError):
        scrape.value("x_unknown")                           # "busy == 0" must not pass on a vanished gauge
    with pytest.raises(KeyError):
        scrape.value("x_misspelt")


def test_counting_from_many_threads_loses_nothing():
    counter = Counter("x_total", "Count.", ("kind",))
    hist = Histogram("x_seconds", "Time.", (1,))

    def work():
        for i in range(5000):
            counter.inc(kind=i % 2)
            hist.observe(0.5)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter.value(kind=0) + counter.value(kind=1) == 40000
    assert hist.count() == 40000


def test_a_finished_generation_moves_tokens_ttft_and_decode_rate():
    metrics = ServerMetrics()
    metrics.record_generation(GenerationOutput(finish_reason="length", prompt_tokens=10, cached_tokens=4,
                                               completion_tokens=11, timings=Timings(20, 30, 100)))
    metrics.record_cancellation(generated_tokens=3)
    scrape = parse(metrics.render())
    assert scrape.value("localserve_prompt_tokens_total") == 10
    assert scrape.value("localserve_cached_prompt_tokens_total") == 4
    assert scrape.value("localserve_generated_tokens_total") == 14
    assert scrape.value("localserve_cancellations_total") == 1
    assert scrape.value("localserve_generations_total", finish_reason="length") == 1
    assert scrape.value("localserve_time_to_first_token_seconds_sum") == pytest.approx(0.05)
    assert scrape.value("localserve_decode_tokens_per_second_sum") == pytest.approx(100)   # 10 tokens / 0.1 s
    assert scrape.value("localserve_decode_tokens_per_second_bucket", le="100") == 1


def test_unknown_paths_and_methods_share_one_label():
    metrics = ServerMetrics()
    for i in range(50):
        metrics.record_request(f"/random/{i}", f"METHOD{i}", 404, 0.001)
    scrape = parse(metrics.render())
    assert scrape.value("localserve_requests_total", endpoint="other", method="other", status="404") == 50


@pytest.mark.parametrize("bad", [
    "x_total 1\n",                                                        # no HELP / TYPE
    "# HELP x_total h\n# TYPE x_total counter\nx_total{a=\"1\"} one\n",    # bad value
    "# HELP x_total h\n# TYPE x_total counter\nx_total{a=1} 1\n",          # unquoted label
    "# HELP x_total h\n# TYPE x_total counter\nx_total 1\n# TYPE x_total counter\n",
    "# HELP h h\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
])
def test_the_test_parser_rejects_what_a_scraper_would(bad):
    with pytest.raises(ValueError):
        parse(bad)


# ---- a real server ---------------------------------------------------------------

@pytest.fixture(scope="module")
def metrics_server(tiny_model):
    srv = ServerProcess(tiny_model, *BASE_FLAGS, "--slots", "2", "--model-id", "tiny")
    yield srv
    srv.stop()


def scrape(port: int):
    resp = request(port, GET_METRICS)
    assert resp.status == 200
    assert resp.header("content-type").startswith("text/plain; version=0.0.4")
    return parse(resp.body.decode())


def test_metrics_parse_and_report_the_runtime(metrics_server):
    first = scrape(metrics_server.port)
    names = set(first.families)
    for name in ("requests_total", "prompt_tokens_total", "generated_tokens_total", "cached_prompt_tokens_total",
                 "queue_depth", "slots_busy", "cancellations_total", "time_to_first_token_seconds",
                 "decode_tokens_per_second", "open_connections", "prompt_cache_bytes"):
        assert "localserve_" + name in names
    assert first.value("localserve_slots_total") == 2
    assert first.value("localserve_open_connections") >= 1      # the scrape's own
    assert first.value("localserve_ready") == 1


def test_counters_move_after_requests(metrics_server):
    port = metrics_server.port
    before = scrape(port)
    body = {"messages": [{"role": "user", "content": "count me"}], "max_tokens": 6, "logit_bias": NO_EOG}
    usage = request(port, post_json("/v1/chat/completions", body)).json()["usage"]
    assert request(port, b"GET /no/such/path HTTP/1.1\r\nHost: localhost\r\n\r\n").status == 404
    assert request(port, b"GET /v1/models/nope HTTP/1.1\r\nHost: localhost\r\n\r\n").status == 404
    # a request is counted just after its answer is written: give the last one a moment
    deadline = time.monotonic() + 5
    while True:
        after = scrape(port)
        if after.total("localserve_requests_total", status="404") - before.total("localserve_requests_total",
                                                                                status="404") >= 2:
            break
        assert time.monotonic() < deadline, "the 404s were not counted"
        time.sleep(0.05)

    def moved(name, **labels):
        return after.value(name, **labels) - before.value(name, **labels)

    assert moved("localserve_requests_total", endpoint="/v1/chat/completions", method="POST", status="200") == 1
    assert moved("localserve_requests_total", endpoint="other", method="GET", status="404") == 1
    assert moved("localserve_requests_total", endpoint="/v1/models/{model}", method="GET", status="404") == 1
    assert moved("localserve_prompt_tokens_total") == usage["prompt_tokens"]
    assert moved("localserve_generated_tokens_total") == usage["completion_tokens"] == 6
    assert moved("localserve_cached_prompt_tokens_total") == usage["prompt_tokens_details"]["cached_tokens"]
    assert moved("localserve_generations_total", finish_reason="length") == 1
    assert moved("localserve_time_to_first_token_seconds_count") == 1
    assert moved("localserve_decode_tokens_per_second_count") == 1


def test_a_failed_generation_is_counted_with_finish_reason_error(metrics_server):
    port = metrics_server.port
    before = scrape(port)
    token_a = token_ids()["A"]      # the grammar allows this token alone, and the bias bans it
    body = {"messages": [{"role": "user", "content": "fail"}], "max_tokens": 4,
            "grammar": f"root ::= <[{token_a}]>", "logit_bias": {str(token_a): -100}}
    resp = request(port, post_json("/v1/chat/completions", body))
    assert resp.status == 400 and resp.json()["error"]["code"] == "no_allowed_token"
    after = scrape(port)
    assert after.value("localserve_generations_total", finish_reason="error") == \
        before.value("localserve_generations_total", finish_reason="error") + 1
    assert after.value("localserve_model_generations_total", model="tiny", finish_reason="error") == \
        before.value("localserve_model_generations_total", model="tiny", finish_reason="error") + 1


def test_a_disconnect_mid_stream_counts_a_cancellation(metrics_server):
    port = metrics_server.port
    before = scrape(port).value("localserve_cancellations_total")
    conn = RawConnection(port)
    conn.send(post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": "go on"}],
                                                 "max_tokens": 2000, "logit_bias": NO_EOG, "stream": True}))
    received = b""
    while received.count(b"data: {") < 3:
        received += conn.sock.recv(4096)
    conn.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        now = scrape(port)
        if now.value("localserve_cancellations_total") > before and now.value("localserve_slots_busy") == 0:
            break
        time.sleep(0.05)
    assert now.value("localserve_cancellations_total") == before + 1
    assert now.value("localserve_generations_total", finish_reason="cancelled") >= 1
    assert now.value("localserve_slots_busy") == 0 and now.value("localserve_queue_depth") == 0
