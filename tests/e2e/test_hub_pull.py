"""Pulls from the Hugging Face Hub, against a mirror started by the test (HF_ENDPOINT): a real
HTTP server serving the Hub's paths for repos of tiny GGUFs (tests/support/hub_mirror.py).

Ollama's /api/pull through the official client's progress stream and raw requests, llama-server's
POST /models with progress on /models/sse, `localserve pull` and `--hf`: the model served once
pulled, a cut pull resumed, a corrupted byte refused, two pulls sharing one download, a client
that leaves stopping it, and every bad input an error in the dialect's shape while the server
goes on serving.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import threading
import time

import httpx
import ollama
import pytest

from clients import ollama_client, openai_sdk
from conftest import ROOT, ServerProcess
from hub_mirror import Mirror, Repo
from tinymodel import CHATML_TEMPLATE, write_tiny_gguf
from tinyvision import write_tiny_mmproj


@pytest.fixture(scope="module")
def files(tmp_path_factory, tiny_model):
    folder = tmp_path_factory.mktemp("hub-files")
    other = write_tiny_gguf(folder / "q8.gguf", chat_template=CHATML_TEMPLATE, seed=3)
    projector = write_tiny_mmproj(folder / "mmproj.gguf")
    return {"tiny-Q4_K_M.gguf": tiny_model.read_bytes(), "tiny-Q8_0.gguf": other.read_bytes(),
            "mmproj-tiny-F16.gguf": projector.read_bytes()}


@pytest.fixture(scope="module")
def mirror(files):
    server = Mirror()
    server.add("org/Tiny-GGUF", Repo(dict(files)))
    yield server
    server.close()


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("pull-home")


def env_for(home, mirror, **extra) -> dict[str, str]:
    return {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache"), "XDG_DATA_HOME": str(home / "data"),
            "HF_ENDPOINT": mirror.endpoint, "HF_TOKEN": "", "HF_HUB_OFFLINE": "",
            "LOCALSERVE_NO_DISCOVER": "0", **extra}


@pytest.fixture(scope="module")
def server(tiny_model, home, mirror):
    srv = ServerProcess(tiny_model, "--model-id", "own", "--slots", "1", env=env_for(home, mirror))
    yield srv
    srv.stop()


def blob(home, data: bytes):
    return home / ".cache" / "huggingface" / "hub" / "models--org--Tiny-GGUF" / "blobs" / hashlib.sha256(data).hexdigest()


def still_serving(server) -> None:
    reply = openai_sdk(server).chat.completions.create(model="own", max_tokens=1,
                                                       messages=[{"role": "user", "content": "hi"}])
    assert reply.model == "own"


def test_ollama_pull_streams_progress_then_serves(server, home, files, mirror):
    client = ollama_client(server)
    events = list(client.pull("hf.co/org/Tiny-GGUF:q8_0", stream=True))
    statuses = [e.status for e in events]
    assert statuses[0] == "pulling manifest" and statuses[-3:] == ["verifying sha256 digest", "writing manifest",
                                                                     "success"]
    model_sha = hashlib.sha256(files["tiny-Q8_0.gguf"]).hexdigest()
    layer = [e for e in events if e.digest == f"sha256:{model_sha}"]
    assert layer[0].status == f"pulling {model_sha[:12]}" and layer[-1].completed == layer[-1].total == \
        len(files["tiny-Q8_0.gguf"])
    assert any(e.digest and e.digest.endswith(hashlib.sha256(files["mmproj-tiny-F16.gguf"]).hexdigest())
               for e in events)
    assert blob(home, files["tiny-Q8_0.gguf"]).read_bytes() == files["tiny-Q8_0.gguf"]
    assert "org/Tiny-GGUF:Q8_0" in {m.model for m in client.list().models}
    answer = client.chat("hf.co/org/Tiny-GGUF:Q8_0", messages=[{"role": "user", "content": "hi"}],
                         options={"num_predict": 2})
    assert answer.done
    models = {m["id"]: m for m in httpx.get(server.base_url + "/v1/models").json()["data"]}
    assert models["org/Tiny-GGUF:Q8_0"]["architecture"]["input_modalities"] == ["text", "image"]
    again = httpx.post(server.base_url + "/api/pull", json={"model": "hf.co/org/Tiny-GGUF:Q8_0", "stream": False})
    assert again.json() == {"status": "success"}


OLLAMA_AS_DOCUMENTED = """
import json, ollama
statuses = [p.status for p in ollama.pull("hf.co/org/Tiny-GGUF", stream=True)]
names = [m.model for m in ollama.list().models]
shown = ollama.show("hf.co/org/Tiny-GGUF:Q4_K_M")
print(json.dumps({"statuses": statuses, "names": names, "family": shown.details.family,
                  "capabilities": shown.capabilities}))
"""


def test_the_ollama_module_as_its_readme_configures_it(server, files):
    """The ollama package's own functions (its README's `ollama.pull`, `ollama.list`,
    `ollama.show`), pointed at this server by OLLAMA_HOST as its docs say. The repo's bare name,
    pulled after another quant (Q8_0) took it, fetches the repo's default quant (Q4_K_M), as
    Ollama would, and the bare name is that quant's from then on."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLLAMA_", "HTTP_", "HTTPS_", "http_", "https_"))}
    done = subprocess.run([sys.executable, "-c", OLLAMA_AS_DOCUMENTED], capture_output=True, text=True, timeout=120,
                          env={**env, "OLLAMA_HOST": f"127.0.0.1:{server.port}"})
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["statuses"][0] == "pulling manifest" and said["statuses"][-1] == "success"
    default_sha = hashlib.sha256(files["tiny-Q4_K_M.gguf"]).hexdigest()
    assert f"pulling {default_sha[:12]}" in said["statuses"]
    assert "org/Tiny-GGUF:Q4_K_M" in said["names"] and "own:latest" in said["names"]
    assert said["family"] == "llama" and "completion" in said["capabilities"]
    models = {m["id"]: m for m in httpx.get(server.base_url + "/v1/models").json()["data"]}
    assert {"org/Tiny-GGUF", "hf.co/org/Tiny-GGUF"} <= set(models["org/Tiny-GGUF:Q4_K_M"]["aliases"])
    assert not {"org/Tiny-GGUF", "hf.co/org/Tiny-GGUF"} & set(models["org/Tiny-GGUF:Q8_0"]["aliases"])
    again = httpx.post(server.base_url + "/api/pull", json={"model": "hf.co/org/Tiny-GGUF", "stream": False})
    assert again.json() == {"status": "success"}


@pytest.mark.parametrize("name, status, words", [
    ("hf.co/../../etc/passwd", 400, "not a Hub repo"), ("https://evil.example/org/repo:Q4_K_M", 400, "another host"),
    ("org/Tiny-GGUF:Q2_K", 404, "no 'Q2_K' quant"), ("org/Nothing-GGUF", 404, "no such repo"),
    ("org/Gated-GGUF", 401, "gated"), ("org/Tiny-GGUF:Q4/../x", 400, "not a quantization")])
def test_pull_errors_in_ollamas_shape(server, mirror, name, status, words):
    mirror.add("org/Gated-GGUF", Repo({"g-Q4_K_M.gguf": b"GGUF"}, gated=True, token="hf_x"))
    reply = httpx.post(server.base_url + "/api/pull", json={"model": name})
    assert reply.status_code == status and words in reply.json()["error"] and set(reply.json()) == {"error"}
    with pytest.raises(ollama.ResponseError) as caught:
        list(ollama_client(server).pull(name, stream=True))
    assert caught.value.status_code == status
    still_serving(server)


def test_corrupted_byte_is_an_error_line(server, mirror, home, files):
    data = files["tiny-Q4_K_M.gguf"]
    mirror.add("org/Bad-GGUF", Repo({"bad-Q4_K_M.gguf": data + b"x"}, mode="corrupt"))
    lines = [json.loads(line) for line in httpx.post(server.base_url + "/api/pull",
                                                      json={"model": "org/Bad-GGUF"}).text.splitlines()]
    assert lines[0] == {"status": "pulling manifest"} and "do not match the checksum" in lines[-1]["error"]
    assert not (home / ".cache" / "huggingface" / "hub" / "models--org--Bad-GGUF" / "snapshots").exists()
    assert "org/Bad-GGUF:Q4_K_M" not in {m["id"] for m in httpx.get(server.base_url + "/v1/models").json()["data"]}
    still_serving(server)


def test_a_pull_that_fails_after_its_stream_began_raises_in_the_ollama_client(server, mirror, files):
    # the head and the first progress lines went out: the failure is the stream's `{"error"}` line,
    # which the client raises on, and the stream ends (the connection is not cut)
    mirror.add("org/Worse-GGUF", Repo({"worse-Q4_K_M.gguf": files["tiny-Q4_K_M.gguf"] + b"y"}, mode="corrupt"))
    statuses = []
    with pytest.raises(ollama.ResponseError, match="do not match the checksum"):
        for part in ollama_client(server).pull("org/Worse-GGUF", stream=True):
            statuses.append(part.status)
    assert statuses[0] == "pulling manifest"
    still_serving(server)


def test_cut_pull_resumes(server, mirror, files):
    data = files["tiny-Q4_K_M.gguf"] + b"cut"
    sha = hashlib.sha256(data).hexdigest()
    mirror.add("org/Cut-GGUF", Repo({"cut-Q4_K_M.gguf": data}, mode="cut", cut_at=100_000))
    with pytest.raises(ollama.ResponseError, match="ended the file at 100000"):
        list(ollama_client(server).pull("org/Cut-GGUF", stream=True))
    assert list(ollama_client(server).pull("org/Cut-GGUF", stream=True))[-1].status == "success"
    assert [s.range for s in mirror.cdn_requests(sha)] == [None, "bytes=100000-"]


def test_two_pulls_share_one_download(server, mirror, files):
    data = files["tiny-Q4_K_M.gguf"] + b"shared"
    sha = hashlib.sha256(data).hexdigest()
    mirror.add("org/Shared-GGUF", Repo({"s-Q4_K_M.gguf": data}, mode="slow", delay=0.002))
    results = []
    threads = [threading.Thread(target=lambda: results.append(list(ollama_client(server).pull(
        "org/Shared-GGUF", stream=True))[-1].status)) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert results == ["success", "success"] and len(mirror.cdn_requests(sha)) == 1


def test_client_leaving_stops_the_download(server, mirror, home, files):
    data = files["tiny-Q4_K_M.gguf"] + b"leave"
    sha = hashlib.sha256(data).hexdigest()
    mirror.add("org/Leave-GGUF", Repo({"l-Q4_K_M.gguf": data}, mode="slow", delay=0.01))
    body = json.dumps({"model": "org/Leave-GGUF"}).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(b"POST /api/pull HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        seen = b""
        while b'"completed":' not in seen or seen.count(b"\n") < 6:
            seen += sock.recv(65536)
    partial = blob(home, data).with_name(sha + ".incomplete").parent.parent.parent / "models--org--Leave-GGUF" / \
        "blobs" / f"{sha}.incomplete"
    # the download stops: the server leaves the CDN's answer (a pause in a download still running,
    # on a busy box, would look like a partial file that stopped growing), then the file stops growing
    assert mirror.cdn_requests(sha)[-1].answered.wait(30), "the download went on after its client left"
    size = -1
    for _ in range(100):
        time.sleep(0.2)
        now = partial.stat().st_size
        if now == size:
            break
        size = now
    assert 0 < size < len(data)
    mirror.repos["org/Leave-GGUF"].delay = 0
    assert list(ollama_client(server).pull("org/Leave-GGUF", stream=True))[-1].status == "success"
    assert mirror.cdn_requests(sha)[-1].range == f"bytes={size}-"


def test_llama_server_post_models_and_sse(server, mirror, files):
    mirror.add("org/Router-GGUF", Repo({"r-Q4_K_M.gguf": files["tiny-Q4_K_M.gguf"] + b"r"}, mode="slow",
                                       delay=0.001))
    events: list[dict] = []
    opened = threading.Event()

    def listen():
        with httpx.stream("GET", server.base_url + "/models/sse", timeout=60) as answer:
            opened.set()
            for line in answer.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    if events[-1]["event"] in ("download_finished", "download_failed"):
                        return

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    opened.wait(10)
    time.sleep(0.5)
    reply = httpx.post(server.base_url + "/models", json={"model": "org/Router-GGUF:Q4_K_M"})
    assert reply.json() == {"success": True}
    listener.join(60)
    progress = [e for e in events if e["event"] == "download_progress"]
    assert progress and events[-1] == {"model": "org/Router-GGUF:Q4_K_M", "event": "download_finished", "data": {}}
    (url, counts), = progress[-1]["data"].items()
    assert url.endswith("/resolve/" + mirror.repos["org/Router-GGUF"].commit + "/r-Q4_K_M.gguf")
    assert counts["done"] == counts["total"]
    assert "org/Router-GGUF:Q4_K_M" in {m["id"] for m in httpx.get(server.base_url + "/models").json()["data"]}
    again = httpx.post(server.base_url + "/models", json={"model": "org/Router-GGUF:Q4_K_M"})
    assert again.status_code == 400 and "already exists" in again.json()["error"]["message"]
    bad = httpx.post(server.base_url + "/models", json={"model": "../x"})
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    # a repo's bare name, held by the quant pulled first, still brings the repo's default quant
    mirror.add("org/Pair-GGUF", Repo({"p-Q4_K_M.gguf": files["tiny-Q4_K_M.gguf"] + b"p",
                                      "p-Q8_0.gguf": files["tiny-Q8_0.gguf"] + b"p"}))
    pulled = httpx.post(server.base_url + "/api/pull", json={"model": "org/Pair-GGUF:Q8_0", "stream": False}, timeout=60)
    assert pulled.json() == {"status": "success"}
    assert httpx.post(server.base_url + "/models", json={"model": "org/Pair-GGUF"}).json() == {"success": True}
    deadline = time.monotonic() + 60
    while "org/Pair-GGUF:Q4_K_M" not in {m["id"] for m in httpx.get(server.base_url + "/models").json()["data"]}:
        assert time.monotonic() < deadline, "the default quant was not pulled"
        time.sleep(0.05)
    again = httpx.post(server.base_url + "/models", json={"model": "org/Pair-GGUF"})
    assert again.status_code == 400 and "as 'org/Pair-GGUF:Q4_K_M'" in again.json()["error"]["message"]


def run_cli(home, mirror, *args, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "localserve", "pull", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**__import__("os").environ, **env_for(home, mirror, **extra)})


def test_cli_pull(tmp_path, mirror, files):
    done = run_cli(tmp_path, mirror, "hf.co/org/Tiny-GGUF")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "pulling manifest" and "100% (" in "\n".join(lines) and "\r" not in done.stdout
    assert lines[-1].startswith("pulled org/Tiny-GGUF:Q4_K_M: ") and lines[-1].endswith("tiny-Q4_K_M.gguf")
    offline = run_cli(tmp_path, mirror, "org/Tiny-GGUF", HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    assert offline.returncode == 0 and offline.stdout.splitlines()[-1].startswith("pulled org/Tiny-GGUF:Q4_K_M")
    bad = run_cli(tmp_path, mirror, "../../x")
    assert bad.returncode == 2 and "not a Hub repo" in bad.stderr
    missing = run_cli(tmp_path, mirror, "org/Missing-GGUF")
    assert missing.returncode == 1 and "no such repo" in missing.stderr


def test_hf_at_start(tmp_path, mirror):
    srv = ServerProcess(None, "--hf", "org/Tiny-GGUF:Q8_0", "--no-discover", env=env_for(tmp_path, mirror))
    try:
        assert [m["id"] for m in httpx.get(srv.base_url + "/v1/models").json()["data"]] == ["org/Tiny-GGUF:Q8_0"]
        reply = openai_sdk(srv).chat.completions.create(model="anything", max_tokens=1,
                                                        messages=[{"role": "user", "content": "hi"}])
        assert reply.model == "org/Tiny-GGUF:Q8_0"
    finally:
        srv.stop()
    failed = ServerProcess(None, "--hf", "org/Missing-GGUF", env=env_for(tmp_path, mirror), wait=False)
    assert failed.proc.wait(60) == 1 and "--hf org/Missing-GGUF: " in failed.log
