"""Scale-out through llama.cpp's RPC backend: `localserve worker` and `--rpc`, on loopback only.

Workers and fronts are real processes. A worker serves one front at a time, so each test
stops its front before the next one uses the same workers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, ServerProcess, free_port
from needs import check_skip, gemma_model, missing
from rawhttp import RawConnection, chat_text, post_json, request
from tinymodel import NO_EOG

from localserve.engine import rpc
from localserve.cli.worker import check_bind_address

@pytest.fixture(autouse=True, scope="module")
def rpc_build():
    check_skip("rpc")
    if not __import__("llama_cpp").llama_supports_rpc():
        missing("rpc", "llama-cpp-python was built without -DGGML_RPC=ON")

PROMPTS = ["alpha beta gamma", "the quick brown fox"]


class Worker:
    """`python -m localserve worker` on a free loopback port."""

    def __init__(self, port: int | None = None, *args: str):
        self.port = port or free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "localserve", "worker", "--port", str(self.port),
                                      "--threads", "1", *args], cwd=ROOT, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stdout), daemon=True).start()
        deadline = time.monotonic() + 30
        while "Starting RPC server" not in "".join(self.lines):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start ({self.proc.poll()}):\n{''.join(self.lines)}")
            time.sleep(0.05)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture(scope="module")
def workers():
    pair = [Worker(), Worker()]
    yield pair
    for worker in pair:
        worker.stop()


def front(model, workers_or_endpoints, *args: str, wait: bool = True) -> ServerProcess:
    endpoints = ",".join(w if isinstance(w, str) else w.endpoint for w in workers_or_endpoints)
    store = () if "--data-dir" in args else ("--no-store",)
    return ServerProcess(model, "--rpc", endpoints, *store, "--slots", "1", *args, wait=wait)


def chat_body(prompt: str, max_tokens: int = 24, stream: bool = False) -> dict:
    return {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0,
            "logit_bias": NO_EOG, "stream": stream}


def greedy(port: int, prompt: str, stream: bool = False) -> str:
    resp = request(port, post_json("/v1/chat/completions", chat_body(prompt, stream=stream)), timeout=60)
    assert resp.status == 200, resp.body
    return chat_text(resp)


def get_json(port: int, path: str):
    return request(port, f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())


def run_localserve(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localserve", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip() and " INFO " not in line
             and " WARNING " not in line]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


# ---- through the workers -----------------------------------------------------------------------

def test_greedy_output_through_two_workers_equals_local(tiny_model, workers):
    local = ServerProcess(tiny_model, "--no-store", "--slots", "1")
    try:
        expected = [greedy(local.port, p) for p in PROMPTS]
    finally:
        local.stop()
    srv = front(tiny_model, workers)
    try:
        assert [greedy(srv.port, p) for p in PROMPTS] == expected
        assert greedy(srv.port, PROMPTS[0], stream=True) == expected[0]
        assert all(len(text) > 5 for text in expected)
        for worker in workers:       # the start-up log names each worker with its layers and memory
            assert srv.wait_log(f"at {worker.endpoint}: ")
        assert "RPC0 at" in srv.log and "RPC1 at" in srv.log and "offloaded to RPC0, RPC1" in srv.log
        health = get_json(srv.port, "/health").json()
        meta = get_json(srv.port, "/v1/models").json()["data"][0]["meta"]
        for devices in (health["devices"], meta["devices"]):
            remote = [d for d in devices if d["type"] == "rpc"]
            assert [d["endpoint"] for d in remote] == [w.endpoint for w in workers]
            assert all(d["layers"] >= 1 and d["memory_total"] > 0 for d in remote)
            assert sum(d["layers"] for d in devices) == 3       # two blocks and the output layer
    finally:
        assert srv.stop() == 0


def test_tensor_split_puts_every_layer_on_the_second_worker(tiny_model, workers):
    srv = front(tiny_model, workers, "--tensor-split", "0,1")
    try:
        devices = {d["name"]: d for d in get_json(srv.port, "/health").json()["devices"]}
        assert devices["RPC0"]["layers"] == 0 and devices["RPC1"]["layers"] == 3
        assert greedy(srv.port, PROMPTS[0])
    finally:
        srv.stop()


def test_killing_a_worker_mid_stream_ends_the_stream_and_the_front(tiny_model):
    doomed, other = Worker(), Worker()
    srv = front(tiny_model, [other, doomed])
    try:
        conn = RawConnection(srv.port, timeout=20)
        conn.send(post_json("/v1/chat/completions", chat_body(PROMPTS[1], max_tokens=100000, stream=True)))
        received = b""
        while received.count(b"data: {") < 5:
            chunk = conn.sock.recv(65536)
            assert chunk, received
            received += chunk
        doomed.kill()
        while conn.sock.recv(65536):       # the stream must end (EOF), not hang: recv times out at 20s
            pass
        assert srv.proc.wait(timeout=10) == rpc.EXIT_WORKER_LOST
        assert srv.wait_log(f"lost RPC worker {doomed.endpoint} (connection refused)", timeout=2), srv.log
    finally:
        srv.stop()
        doomed.stop()
        other.stop()


def test_a_background_response_cut_off_by_a_lost_worker_is_failed_at_the_next_start(tiny_model, tmp_path):
    doomed = Worker()
    srv = front(tiny_model, [doomed], "--data-dir", str(tmp_path))
    try:
        body = {"model": "x", "input": "hi", "background": True, "max_output_tokens": 100000, "logit_bias": NO_EOG}
        response_id = request(srv.port, post_json("/v1/responses", body)).json()["id"]
        deadline = time.monotonic() + 20
        while get_json(srv.port, f"/v1/responses/{response_id}").json()["status"] != "in_progress":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        doomed.kill()
        assert srv.proc.wait(timeout=10) == rpc.EXIT_WORKER_LOST
    finally:
        srv.stop()
        doomed.stop()
    local = ServerProcess(tiny_model, "--data-dir", str(tmp_path))       # the store outlives the front
    try:
        assert local.wait_log("marked 1 response(s) failed")
        assert get_json(local.port, f"/v1/responses/{response_id}").json()["status"] == "failed"
    finally:
        local.stop()


def test_front_waits_for_a_late_worker_answering_503_meanwhile(tiny_model):
    port = free_port()
    srv = front(tiny_model, [f"127.0.0.1:{port}"], wait=False)
    worker = None
    try:
        assert srv.wait_log(f"RPC worker 127.0.0.1:{port} is not reachable yet", timeout=20)
        resp = get_json(srv.port, "/health")
        assert resp.status == 503 and resp.json()["status"] == "loading"
        assert get_json(srv.port, "/v1/models").status == 503
        worker = Worker(port)
        srv.wait_ready(timeout=30)
        assert srv.wait_log(f"RPC worker 127.0.0.1:{port} is up")
        assert len(greedy(srv.port, PROMPTS[0])) > 5
    finally:
        srv.stop()
        if worker:
            worker.stop()


def test_sigterm_while_waiting_for_workers_exits_promptly(tiny_model):
    srv = front(tiny_model, [f"127.0.0.1:{free_port()}"], wait=False)
    assert srv.wait_log("is not reachable yet", timeout=20)
    assert srv.stop() == 0         # exited on SIGTERM itself: stop() kills (exit -9) what is still there after 15 s


# ---- start-up failures: one line, exit 2 ----------------------------------------------------

def test_unreachable_worker_with_rpc_wait_0_is_exit_2_naming_it(tiny_model):
    endpoint = f"127.0.0.1:{free_port()}"
    result = run_localserve("--model", str(tiny_model), "--port", "0", "--no-store", "--rpc", endpoint,
                            "--rpc-wait", "0")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert endpoint in line and "unreachable" in line


def test_something_else_on_the_worker_port_is_exit_2_naming_it(tiny_model):
    """It accepts connections, so the probe passes, but it does not speak RPC: llama.cpp aborts
    in the handshake, and the front turns that into one line and exit 2."""
    with socket.socket() as impostor:
        impostor.bind(("127.0.0.1", 0))
        impostor.listen()
        endpoint = f"127.0.0.1:{impostor.getsockname()[1]}"

        def answer_nonsense():
            while True:
                try:
                    conn, _ = impostor.accept()
                except OSError:
                    return
                with conn:
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        threading.Thread(target=answer_nonsense, daemon=True).start()
        result = run_localserve("--model", str(tiny_model), "--port", "0", "--no-store", "--rpc", endpoint)
    assert result.returncode == 2
    line = [l for l in result.stderr.splitlines() if l.startswith("localserve:")]
    assert len(line) == 1 and f"RPC worker {endpoint}" in line[0], result.stderr


def test_a_build_without_rpc_says_how_to_rebuild(tmp_path, tiny_model):
    (tmp_path / "sitecustomize.py").write_text("import llama_cpp\nllama_cpp.llama_supports_rpc = lambda: False\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for args in (["worker", "--port", str(free_port())],
                 ["--model", str(tiny_model), "--port", "0", "--no-store", "--rpc", "127.0.0.1:1"]):
        result = subprocess.run([sys.executable, "-m", "localserve", *args], cwd=ROOT, capture_output=True,
                                text=True, env=env, timeout=60)
        assert result.returncode == 2, result.stderr
        assert 'CMAKE_ARGS="-DGGML_RPC=ON -DGGML_OPENMP=OFF -DMTMD_VIDEO=OFF" pip install --no-cache-dir --force-reinstall' in one_line(result.stderr)


def test_bad_rpc_values_are_exit_2():
    for args in (["--rpc", "nocolon"], ["--rpc", "127.0.0.1:1,127.0.0.1:1"], ["--tensor-split", "a,b"],
                 ["--rpc-wait", "-1"]):
        result = run_localserve(*args)
        assert result.returncode == 2, args
        assert args[0] in result.stderr


def test_worker_refuses_a_public_address_without_allow_public():
    for host in ("8.8.8.8", "0.0.0.0"):
        result = run_localserve("worker", "--host", host, "--port", str(free_port()), timeout=30)
        assert result.returncode == 2
        line = one_line(result.stderr)
        assert "--allow-public" in line and "authentication" in line


def test_worker_port_in_use_is_exit_2():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = run_localserve("worker", "--port", str(busy.getsockname()[1]), timeout=30)
    assert result.returncode == 2
    assert "cannot listen on 127.0.0.1" in one_line(result.stderr)


def test_worker_stops_cleanly_on_sigterm(tmp_path):
    worker = Worker(None, "--cache-dir", str(tmp_path / "cache"))
    assert (tmp_path / "cache").is_dir()
    worker.proc.send_signal(signal.SIGTERM)
    assert worker.proc.wait(timeout=10) == 0


# ---- a real model: Gemma 3 270M (the benches') -------------------------------------------------

def test_a_real_model_answers_through_two_workers(workers):
    model = gemma_model()
    body = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    # The workers keep every weight in plain layout (RPC has no repacked buffer types), so the local
    # reference does too: repacked Q4_K kernels round differently and may pick another greedy token.
    local = ServerProcess(model, "--no-store", "--slots", "1", "--ctx-size", "512", "--cpu-weights", "plain")
    try:
        expected = request(local.port, post_json("/v1/completions", body), timeout=60).json()
    finally:
        local.stop()
    srv = front(model, workers, "--ctx-size", "512")
    try:
        answer = request(srv.port, post_json("/v1/completions", body), timeout=120).json()
        assert answer["choices"][0]["text"].strip()
        assert answer["choices"][0]["text"] == expected["choices"][0]["text"]
        layers = {d["name"]: d["layers"] for d in get_json(srv.port, "/health").json()["devices"]}
        assert layers["RPC0"] > 0 and layers["RPC1"] > 0
    finally:
        srv.stop()


# ---- pieces, without processes -----------------------------------------------------------------

def test_endpoint_lists_are_normalised_and_checked():
    assert rpc.worker_list(["10.0.0.2:50052, box-b:50052", "127.0.0.1:7"]) == \
        ("10.0.0.2:50052", "box-b:50052", "127.0.0.1:7")
    for bad in (["host"], ["host:"], ["host:99999"], ["[::1]:50052"], ["a:1", "a:1"]):
        with pytest.raises(ValueError):
            rpc.worker_list(bad)
    assert rpc.split_proportions("3,1") == (3.0, 1.0)
    assert rpc.layers_to_offload(0, ["a:1"]) == -1 and rpc.layers_to_offload(5, ["a:1"]) == 5
    assert rpc.layers_to_offload(0, []) == 0


def test_which_bind_addresses_count_as_private():
    for address in ("127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.5", "100.64.0.7", "169.254.1.1"):
        assert rpc.is_private_address(address), address
    for address in ("8.8.8.8", "0.0.0.0", "1.1.1.1", "100.128.0.1"):
        assert not rpc.is_private_address(address), address
    assert check_bind_address("127.0.0.1", allow_public=False) == "127.0.0.1"
    assert check_bind_address("8.8.8.8", allow_public=True) == "8.8.8.8"    # resolves only: nothing is sent
    with pytest.raises(rpc.RpcError):
        check_bind_address("8.8.8.8", allow_public=False)


def test_waiting_backs_off_within_bounds_and_names_the_missing_worker():
    now = [0.0]
    pauses: list[float] = []
    up_at = {"a:1": 0.0, "b:2": 5.0}

    def fake_probe(endpoint, timeout):
        return None if now[0] >= up_at[endpoint] else "connection refused"

    def fake_sleep(seconds):
        pauses.append(seconds)
        now[0] += seconds

    rpc.wait_for_workers(["a:1", "b:2"], 30, probe=fake_probe, clock=lambda: now[0], sleep=fake_sleep)
    assert 5.0 <= now[0] <= 7.0
    assert pauses[0] == 0.25 and max(pauses) <= 2.0
    up_at["b:2"] = 100.0
    now[0], pauses[:] = 0.0, []
    with pytest.raises(rpc.RpcError, match=r"b:2 is unreachable \(connection refused\) after waiting 10s"):
        rpc.wait_for_workers(["a:1", "b:2"], 10, probe=fake_probe, clock=lambda: now[0], sleep=fake_sleep)
    assert now[0] == pytest.approx(10.0)
