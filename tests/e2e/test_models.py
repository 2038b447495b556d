"""Several models: the catalogue, load on first use, sharing a load, LRU and keep-alive unloads,
a failing load, per-model runtimes side by side, and what an unload gives back.

Every server here serves tiny generated models from a --models-dir: "alpha", "beta", "gamma"
(half a megabyte each), "slow1"/"slow2" (a few MB: seconds of decoding for a long answer, time
to act while a stream runs) and "broken" (a GGUF cut short). States are read from /v1/models,
/slots and /metrics, never from a stopwatch.
"""

from __future__ import annotations

import shutil
import threading
import time
from pathlib import Path

import json
import urllib.error
import urllib.parse
import urllib.request

import anthropic
import openai
import pytest

from clients import anthropic_sdk, openai_sdk
from conftest import ServerProcess, slow_model
from promtext import parse
from sse import parse_sse
from tinymodel import CHATML_TEMPLATE, NO_EOG, write_tiny_gguf

LONG_ANSWER = 1500          # tokens of a slow model's stream: seconds on one thread
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory, models_dir) -> Path:
    folder = tmp_path_factory.mktemp("catalogue")
    for name in ("alpha", "beta", "gamma"):
        write_tiny_gguf(folder / f"{name}.gguf", chat_template=CHATML_TEMPLATE)
    for name in ("slow1", "slow2"):
        shutil.copy(slow_model(models_dir), folder / f"{name}.gguf")
    (folder / "broken.gguf").write_bytes((folder / "alpha.gguf").read_bytes()[:5000])
    return folder


def start(catalogue: Path, tmp_path_factory, *args: str) -> ServerProcess:
    data = tmp_path_factory.mktemp("data")
    return ServerProcess(None, "--models-dir", str(catalogue), "--slots", "1", *args,
                         env={"XDG_DATA_HOME": str(data)})


@pytest.fixture(scope="module")
def srv(catalogue, tmp_path_factory):
    server = start(catalogue, tmp_path_factory)
    yield server
    server.stop()


def states(server) -> dict[str, str]:
    return {m["id"]: m["state"] for m in http.get(server.base_url + "/v1/models").json()["data"]}


def metrics(server):
    return parse(http.get(server.base_url + "/metrics").text)


def loads(server, model: str) -> float:
    return metrics(server).value("localserve_model_loads_total", model=model, outcome="loaded")


def chat(server, model: str, **extra) -> http.Response:
    return http.post(server.base_url + "/v1/chat/completions",
                     json={"model": model, "messages": HI, "max_tokens": 3, **extra})


def wait_until(check, timeout: float = 30.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Answer:
    """An HTTP answer read with urllib (the standard library's client)."""

    def __init__(self, status: int, body: bytes):
        self.status_code, self.content = status, body

    def json(self):
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode()

    def raise_for_status(self):
        assert self.status_code < 400, self.content


def call(method: str, url: str, body: dict | None = None, headers: dict | None = None,
         params: dict | None = None, timeout: float = 60) -> Answer:
    if params:
        url += "?" + urllib.parse.urlencode(params)
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"content-type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return Answer(response.status, response.read())
    except urllib.error.HTTPError as error:
        return Answer(error.code, error.read())


class http:     # the few calls these tests make, by method
    @staticmethod
    def get(url: str, **options) -> Answer:
        return call("GET", url, **options)

    @staticmethod
    def post(url: str, json: dict, **options) -> Answer:
        return call("POST", url, json, **options)


def stream_chunks(url: str, body: dict, timeout: float = 120):
    """(status, iterator of byte chunks as they arrive) of a streamed POST."""
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json"})
    response = urllib.request.urlopen(request, timeout=timeout)
    return response.status, iter(lambda: response.read1(65536), b""), response


class LongStream(threading.Thread):
    """A streamed chat with the slow model that runs for seconds; keeps every SSE block."""

    def __init__(self, server, model: str, tokens: int = LONG_ANSWER):
        super().__init__(daemon=True)
        self.server, self.model, self.tokens = server, model, tokens
        self.started = threading.Event()
        self.body = b""
        self.ended_at = None

    def run(self):
        body = {"model": self.model, "stream": True, "messages": HI, "max_tokens": self.tokens, "logit_bias": NO_EOG}
        _, chunks, response = stream_chunks(self.server.base_url + "/v1/chat/completions", body)
        with response:
            for chunk in chunks:
                self.body += chunk
                if b"data: {" in self.body:
                    self.started.set()
        self.ended_at = time.monotonic()

    def chunks(self) -> list[dict]:
        return [data for _, data in parse_sse(self.body)]


# ---- the catalogue and load on demand -------------------------------------------------

def test_the_catalogue_lists_every_model_unloaded_until_first_use(srv):
    listed = http.get(srv.base_url + "/v1/models").json()["data"]
    by_id = {m["id"]: m for m in listed}
    assert set(by_id) == {"alpha", "beta", "gamma", "slow1", "slow2", "broken"}
    assert by_id["gamma"]["state"] == "unloaded" and "meta" not in by_id["gamma"]
    assert by_id["gamma"]["settings"]["slots"] == 1
    # random weights: without the bias an end-of-generation token comes now and then ("stop")
    answer = openai_sdk(srv).chat.completions.create(model="gamma", messages=HI, max_tokens=3, logit_bias=NO_EOG)
    assert answer.model == "gamma" and answer.choices[0].finish_reason == "length"
    gamma = http.get(srv.base_url + "/v1/models/gamma").json()
    assert gamma["state"] == "loaded" and gamma["meta"]["n_vocab"] > 0
    assert states(srv)["beta"] == "unloaded"


def test_each_dialect_picks_the_model_by_name(srv):
    client = openai_sdk(srv)
    assert client.completions.create(model="alpha", prompt="hi", max_tokens=2).model == "alpha"
    assert client.responses.create(model="beta", input="hi", max_output_tokens=2).model == "beta"
    message = anthropic_sdk(srv).messages.create(model="alpha", max_tokens=2, messages=HI)
    assert message.model == "alpha"
    scrape = metrics(srv)
    # a tiny model may end the answer early: count the generation however it finished
    assert sum(scrape.value("localserve_model_generations_total", model="beta", finish_reason=reason)
               for reason in ("length", "stop")) == 1
    assert scrape.value("localserve_model_loaded", model="alpha") == 1


@pytest.mark.parametrize("dialect", ["chat", "completions", "responses", "messages", "count_tokens"])
def test_an_unknown_model_is_404_model_not_found_in_the_dialects_shape(srv, dialect):
    if dialect in ("messages", "count_tokens"):
        client = anthropic_sdk(srv)
        with pytest.raises(anthropic.NotFoundError) as caught:
            if dialect == "messages":
                client.messages.create(model="nope", max_tokens=2, messages=HI)
            else:
                client.messages.count_tokens(model="nope", messages=HI)
        error = caught.value.body["error"]
        assert error["type"] == "not_found_error"
    else:
        client = openai_sdk(srv)
        with pytest.raises(openai.NotFoundError) as caught:
            if dialect == "chat":
                client.chat.completions.create(model="nope", messages=HI, max_tokens=2)
            elif dialect == "completions":
                client.completions.create(model="nope", prompt="hi", max_tokens=2)
            else:
                client.responses.create(model="nope", input="hi", max_output_tokens=2)
        error = caught.value.body
        assert error["code"] == "model_not_found" and error["param"] == "model"
    assert "'nope'" in error["message"] and "'alpha'" in error["message"] and "'slow2'" in error["message"]


def test_a_failing_load_fails_its_requests_and_the_daemon_serves_on(srv):
    for _ in range(2):      # and the next request tries again, and fails the same way
        answer = chat(srv, "broken")
        assert answer.status_code == 500
        error = answer.json()["error"]
        assert error["code"] == "model_load_failed" and "broken.gguf" in error["message"]
    assert states(srv)["broken"] == "unloaded"
    assert "broken.gguf" in http.get(srv.base_url + "/v1/models/broken").json()["error"]
    assert chat(srv, "alpha").status_code == 200
    assert metrics(srv).value("localserve_model_loads_total", model="broken", outcome="failed") == 2


def test_health_of_one_model(srv):
    chat(srv, "alpha")
    assert http.get(srv.base_url + "/health").json() == {"status": "ok"}
    loaded = http.get(srv.base_url + "/health", params={"model": "alpha"})
    assert loaded.status_code == 200 and loaded.json()["state"] == "loaded"
    http.post(srv.base_url + "/models/unload", json={"model": "alpha"}).raise_for_status()
    unloaded = http.get(srv.base_url + "/health", params={"model": "alpha"})
    assert unloaded.status_code == 503 and unloaded.json()["state"] == "unloaded"
    assert http.get(srv.base_url + "/health", params={"model": "nope"}).status_code == 404


def test_a_stored_response_keeps_its_model_and_another_model_continues_it(srv):
    client = openai_sdk(srv)
    first = client.responses.create(model="alpha", input="hi", max_output_tokens=2)
    second = client.responses.create(model="gamma", input="and?", previous_response_id=first.id,
                                     max_output_tokens=2, extra_body={"logit_bias": NO_EOG})   # cut, not ended
    assert second.model == "gamma" and second.status == "incomplete"
    assert client.responses.retrieve(first.id).model == "alpha"
    items = client.responses.input_items.list(second.id)
    assert len(items.data) == 1


def test_keep_alive_in_a_request_is_checked(srv):
    answer = chat(srv, "alpha", keep_alive="soon")
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "keep_alive"


def test_two_models_stream_at_once_each_on_its_own_runtime(srv):
    one, two = LongStream(srv, "slow1"), LongStream(srv, "slow2")
    one.start()
    two.start()

    def both_busy():
        slots = http.get(srv.base_url + "/slots").json()
        busy = {slot["model"] for slot in slots["slots"] if slot["busy"]}
        return busy >= {"slow1", "slow2"}
    wait_until(both_busy, what="both models generating at the same time")
    one.join(120)
    two.join(120)
    for stream in (one, two):
        chunks = stream.chunks()
        assert chunks[-1]["choices"][0]["finish_reason"] == "length"
        assert sum(1 for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")) > 100


# ---- limits: LRU, keep-alive, waiting for busy models -------------------------------------

def test_lru_eviction_at_max_models_2(catalogue, tmp_path_factory):
    server = start(catalogue, tmp_path_factory, "--max-models", "2")
    try:
        for model in ("alpha", "beta", "alpha", "gamma"):      # beta is the least recently used
            assert chat(server, model).status_code == 200
        assert states(server) | {"slow1": "-", "slow2": "-", "broken": "-"} == {
            "alpha": "loaded", "beta": "unloaded", "gamma": "loaded", "slow1": "-", "slow2": "-", "broken": "-"}
        assert metrics(server).value("localserve_model_unloads_total", model="beta", reason="evicted") == 1
    finally:
        server.stop()


def test_keep_alive_unloads_idle_models(catalogue, tmp_path_factory):
    server = start(catalogue, tmp_path_factory, "--keep-alive", "1s")
    try:
        assert chat(server, "alpha").status_code == 200
        assert chat(server, "beta", keep_alive=-1).status_code == 200      # this one stays
        assert states(server)["alpha"] == "loaded"
        wait_until(lambda: states(server)["alpha"] == "unloaded", what="alpha's keep-alive to run out")
        assert metrics(server).value("localserve_model_unloads_total", model="alpha", reason="idle") == 1
        assert states(server)["beta"] == "loaded"
    finally:
        server.stop()


def test_a_requests_keep_alive_beats_a_long_default(catalogue, tmp_path_factory):
    """The server keeps idle models an hour: only the request's own keep_alive can unload them
    within the test, so a 0 or a "1s" that fell back to the default would never show here."""
    server = start(catalogue, tmp_path_factory, "--keep-alive", "1h")
    try:
        assert chat(server, "beta").status_code == 200                     # the default: an hour
        assert chat(server, "gamma", keep_alive=0).status_code == 200       # unloaded after its request
        wait_until(lambda: states(server)["gamma"] == "unloaded", what="gamma to unload after its request")
        assert metrics(server).value("localserve_model_unloads_total", model="gamma", reason="idle") == 1
        assert chat(server, "alpha", keep_alive="1s").status_code == 200
        wait_until(lambda: states(server)["alpha"] == "unloaded", what="alpha's own keep-alive to run out")
        assert states(server)["beta"] == "loaded"
        assert chat(server, "gamma", keep_alive="0s").status_code == 200    # a duration string of zero too
        wait_until(lambda: states(server)["gamma"] == "unloaded", what="gamma to unload after its request")
        assert states(server)["beta"] == "loaded"
    finally:
        server.stop()


def test_a_busy_model_is_never_unloaded_under_its_stream_and_waiters_share_one_load(catalogue, tmp_path_factory):
    """--max-models 1: while slow1 streams, requests for alpha wait (streams get ': loading'),
    all of them on one load, which starts once slow1's stream has ended whole."""
    server = start(catalogue, tmp_path_factory, "--max-models", "1")
    try:
        long = LongStream(server, "slow1")
        long.start()
        assert long.started.wait(60)
        results: list[tuple[int, bytes, float]] = []

        def ask_alpha(stream: bool):
            body = {"model": "alpha", "messages": HI, "max_tokens": 3, "stream": stream}
            status, chunks, response = stream_chunks(server.base_url + "/v1/chat/completions", body)
            with response:
                results.append((status, b"".join(chunks), time.monotonic()))

        def ask_badly():     # a stream whose head goes out while alpha loads: its 400 comes in-band
            body = {"model": "alpha", "messages": HI, "stream": True, "n": 17}
            status, chunks, response = stream_chunks(server.base_url + "/v1/chat/completions", body)
            with response:
                bad.append((status, b"".join(chunks)))

        bad: list[tuple[int, bytes]] = []
        waiters = [threading.Thread(target=ask_alpha, args=(i % 2 == 0,)) for i in range(4)]
        waiters.append(threading.Thread(target=ask_badly))
        for waiter in waiters:
            waiter.start()
        wait_until(lambda: states(server)["alpha"] == "loading", what="alpha's load to start")
        assert states(server)["slow1"] == "loaded"
        for waiter in waiters:
            waiter.join(120)
        long.join(120)
        assert long.chunks()[-1]["choices"][0]["finish_reason"] == "length"      # the stream ran to its end
        assert len(results) == 4 and all(status == 200 for status, _, _ in results)
        assert all(at >= long.ended_at for _, _, at in results)
        streamed = [body for status, body, _ in results if body.startswith(b": loading")]
        assert len(streamed) == 2 and all(body.rstrip().endswith(b"data: [DONE]") for body in streamed)
        assert loads(server, "alpha") == 1
        assert states(server)["slow1"] == "unloaded"
        (status, body), = bad
        events = parse_sse(body, comments=True)
        assert status == 200 and events[0] == (":", None)
        assert events[-1][1]["error"]["param"] == "n" and events[-1][1]["error"]["type"] == "invalid_request_error"
    finally:
        server.stop()


def test_a_load_that_finds_no_idle_model_in_time_is_503_retry_after(catalogue, tmp_path_factory):
    # the slow model's stream must still run after alpha's wait and the unload's: no drafts (a copy drafted
    # well ends it sooner), and more tokens than elsewhere (a fast AVX-512 core wrote 1,500 in under 2 s)
    server = start(catalogue, tmp_path_factory, "--max-models", "1", "--evict-wait", "0.5", "--speculative", "off")
    try:
        long = LongStream(server, "slow1", tokens=4 * LONG_ANSWER)
        long.start()
        assert long.started.wait(60)
        request = urllib.request.Request(server.base_url + "/v1/chat/completions", method="POST",
                                         data=json.dumps({"model": "alpha", "messages": HI}).encode(),
                                         headers={"content-type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=60)
        assert caught.value.code == 503 and caught.value.headers["Retry-After"]
        error = json.loads(caught.value.read())["error"]
        assert error["code"] == "model_busy" and "slow1" in error["message"] and "--max-models" in error["message"]
        busy = http.post(server.base_url + "/models/unload", json={"model": "slow1"})
        assert busy.status_code == 503 and states(server)["slow1"] == "loaded"
        long.join(120)
        assert long.chunks()[-1]["choices"][0]["finish_reason"] == "length"     # never cut
        assert chat(server, "alpha").status_code == 200                          # room now: slow1 idle
    finally:
        server.stop()


def test_an_unload_waits_for_the_running_stream(catalogue, tmp_path_factory):
    server = start(catalogue, tmp_path_factory)
    try:
        long = LongStream(server, "slow2")
        long.start()
        assert long.started.wait(60)
        answer = http.post(server.base_url + "/models/unload", json={"model": "slow2"}, timeout=120)
        answered_at = time.monotonic()
        long.join(120)
        assert answer.status_code == 200 and answer.json() == {"model": "slow2", "state": "unloaded"}
        assert long.chunks()[-1]["choices"][0]["finish_reason"] == "length"
        assert long.ended_at <= answered_at
        assert states(server)["slow2"] == "unloaded"
        loaded = http.post(server.base_url + "/models/load", json={"model": "slow2"}, timeout=60)
        assert loaded.status_code == 200 and states(server)["slow2"] == "loaded"
    finally:
        server.stop()


def test_a_model_larger_than_max_memory_is_503_naming_it(catalogue, tmp_path_factory):
    server = start(catalogue, tmp_path_factory, "--max-memory", "1M")
    try:
        answer = chat(server, "alpha")
        assert answer.status_code == 503
        assert answer.json()["error"]["code"] == "model_too_large" and "--max-memory" in answer.json()["error"]["message"]
        assert http.get(server.base_url + "/health").status_code == 200
    finally:
        server.stop()


def test_model_operations_need_the_api_key(catalogue, tmp_path_factory):
    server = start(catalogue, tmp_path_factory, "--api-key", "sekrit", "--preload", "beta")
    try:
        assert states_with_key(server)["beta"] == "loaded"       # --preload
        url = server.base_url + "/models/unload"
        assert http.post(url, json={"model": "beta"}).status_code == 401
        assert http.post(url, json={"model": "beta"}, headers={"x-api-key": "sekrit"}).status_code == 200
        assert http.post(url, json={"model": "nope"}, headers={"x-api-key": "sekrit"}).status_code == 404
    finally:
        server.stop()


def states_with_key(server) -> dict[str, str]:
    listed = http.get(server.base_url + "/v1/models", headers={"x-api-key": "sekrit"}).json()["data"]
    return {m["id"]: m["state"] for m in listed}


# ---- what an unload gives back -------------------------------------------------------------

def proc_counts(pid: int) -> tuple[int, int, int]:
    """(RSS bytes, threads, open file descriptors) of a process, from /proc, once the threads and
    descriptors have settled: the connection of the last request ends just after its answer."""
    def read() -> tuple[int, int, int]:
        status = Path(f"/proc/{pid}/status").read_text()
        rss_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))
        threads = len(list(Path(f"/proc/{pid}/task").iterdir()))
        fds = len(list(Path(f"/proc/{pid}/fd").iterdir()))
        return rss_kb * 1024, threads, fds
    last = read()
    for _ in range(50):
        time.sleep(0.2)
        now = read()
        if now[1:] == last[1:]:
            return now
        last = now
    return last


def test_twenty_load_unload_cycles_leave_no_memory_threads_or_files_behind(catalogue, tmp_path_factory):
    server = start(catalogue, tmp_path_factory)
    pid = server.proc.pid
    try:
        class client:
            @staticmethod
            def post(path: str, json: dict) -> Answer:
                return http.post(server.base_url + path, json=json)
        if True:
            def cycle():
                assert client.post("/models/load", json={"model": "slow1"}).status_code == 200
                assert client.post("/v1/chat/completions", json={"model": "slow1", "messages": HI,
                                                                  "max_tokens": 8}).status_code == 200
                assert client.post("/models/unload", json={"model": "slow1"}).json()["state"] == "unloaded"
            cycle()         # the first load sets up what lives as long as the process (backends, pools)
            rss0, threads0, fds0 = proc_counts(pid)
            loaded_rss = 0
            for _ in range(20):
                cycle()
            rss1, threads1, fds1 = proc_counts(pid)
            client.post("/models/load", json={"model": "slow1"})
            loaded_rss = proc_counts(pid)[0]
            client.post("/models/unload", json={"model": "slow1"})
        assert loaded_rss - rss0 > 8 * 1024 * 1024, "a loaded slow1 should hold more than the tolerance below"
        assert rss1 - rss0 < 4 * 1024 * 1024, f"RSS grew {(rss1 - rss0) / 2**20:.1f} MiB over 20 cycles"
        assert threads1 == threads0 and fds1 == fds0
    finally:
        server.stop()


def test_model_alone_stays_loaded_whatever_a_request_asks(catalogue, tmp_path_factory):
    """--model alone is today's server: any name, loaded at start, kept (keep_alive 0 is only checked)."""
    server = ServerProcess(catalogue / "alpha.gguf", "--no-store")
    try:
        assert states(server) == {"alpha": "loaded"}
        assert chat(server, "gpt-4o", keep_alive=0).json()["model"] == "alpha"
        assert chat(server, "claude", keep_alive="later").status_code == 400
        time.sleep(1.0)     # four keep-alive sweeps (KEEP_ALIVE_SWEEP): what is due would be unloaded by now
        assert states(server) == {"alpha": "loaded"}
        assert metrics(server).total("localserve_model_unloads_total") == 0
    finally:
        server.stop()
