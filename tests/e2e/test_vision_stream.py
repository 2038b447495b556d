"""Streams while images are encoded, on a projector slow enough to watch (576 positions an image,
a ViT of four blocks 256 wide): the `: prefill` keepalive goes on while the runtime evaluates
the images, and a client that leaves cancels the job between two images; the server goes on."""

from __future__ import annotations

import re

import pytest

import imagefiles
from conftest import ServerProcess
from rawhttp import RawConnection, post_json, request
from sse import parse_sse
from tinymodel import CHATML_TEMPLATE, NO_EOG, write_tiny_gguf
from tinyvision import write_tiny_mmproj


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("slowvision")
    model = write_tiny_gguf(d / "tiny.gguf", chat_template=CHATML_TEMPLATE, context_length=16384)
    mmproj = write_tiny_mmproj(d / "mmproj-slow.gguf", n_embd=256, n_head=4, n_ff=1024, n_layer=4,
                               image_size=336, patch_size=14)
    srv = ServerProcess(model, "--model-id", "tiny", "--ctx-size", "16384", "--slots", "1", "--no-store",
                        "--prefill-keepalive", "0.05", "--mmproj", str(mmproj))
    yield srv
    srv.stop()


def images_request(n: int, seed: int, max_tokens: int = 2) -> bytes:
    content = [{"type": "text", "text": f"{n} pictures"}]
    content += [{"type": "image_url", "image_url": {"url": imagefiles.data_url(imagefiles.png(32, 32, seed=seed + i))}}
                for i in range(n)]
    return post_json("/v1/chat/completions", {"messages": [{"role": "user", "content": content}],
                                              "max_tokens": max_tokens, "stream": True, "logit_bias": NO_EOG})


def images_encoded(server) -> float:
    body = request(server.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").body
    found = re.search(r"^localserve_images_encoded_total ([0-9.e+]+)$", body.decode(), re.M)
    return float(found.group(1)) if found else 0.0


def test_keepalives_go_on_while_images_are_encoded(server):
    conn = RawConnection(server.port, timeout=120)
    try:
        conn.send(images_request(6, seed=0))
        resp = conn.read_response()
    finally:
        conn.close()
    assert resp.status == 200
    events = list(parse_sse(resp.body, comments=True))
    first_data = next(i for i, (name, data) in enumerate(events) if name is None and data is not None)
    assert sum(1 for name, _ in events[:first_data] if name == ":") >= 2
    assert b"data: [DONE]" in resp.body


def test_a_client_gone_while_images_are_encoded_cancels_between_them(server):
    before = images_encoded(server)
    conn = RawConnection(server.port, timeout=120)
    conn.send(images_request(16, seed=100))
    received = b""
    while b": prefill" not in received:
        received += conn.sock.recv(4096)
    conn.close()
    assert server.wait_log("cancelled job", timeout=60)
    assert images_encoded(server) - before < 16            # the rest were never encoded
    resp = request(server.port, post_json("/v1/chat/completions", {
        "messages": [{"role": "user", "content": "still there?"}], "max_tokens": 2, "logit_bias": NO_EOG}))
    assert resp.status == 200
