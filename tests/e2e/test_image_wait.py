"""A large image's decode as a client sees it (dialects/media_wait.py), on the tiny model with the
tiny vision projector and a keepalive interval shorter than a few large images take to decode
(stb's inflate of a 28-megapixel PNG, then libmtmd's resize: about half a second each): a
stream's head and `: prefill` go out while the images decode, before there is a job; a client
that leaves then stops the request before it becomes a job (/metrics: no image encoded); an
image stb refuses once the head is out is an error in the stream; and every bad image,
streamed or not, is still a 400 before any head, in the dialect's own shape, those stb itself
refuses (on the decode thread, within the interval) among them. The routes that count a
prompt's tokens (no job) decode their images the same way, off the connection thread, and
answer a refused one in their own shape.
"""

from __future__ import annotations

import functools
import struct
import zlib

import pytest

import hostile_images
from conftest import ServerProcess
from media_server import metric
from rawhttp import RawConnection, post_json, request, request_id_of
from sse import parse_sse
from test_image_bombs import anthropic, chat, responses
from tinyaudio import tone, wav_bytes
from tinyvision import write_tiny_mmproj

KEEPALIVE = 0.5            # seconds: below what LARGE images together take to decode
LARGE = 3                  # images a request: within MAX_REQUEST_PIXELS (128 Mi) together


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory):
    mmproj = write_tiny_mmproj(tmp_path_factory.mktemp("mmproj") / "mmproj-tiny.gguf")
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--slots", "1", "--mmproj", str(mmproj),
                        "--prefill-keepalive", str(KEEPALIVE), "--no-store")
    yield srv
    srv.stop()


def large_png(seed: int, width: int = 7000, height: int = 4096) -> bytes:
    """A grey PNG, small on the wire, 28.7 megapixels to decode; the seed's text chunk makes it
    an image of its own (no decode of another request's is reused)."""
    plain = _grey_png(width, height)
    text = b"seed\x00" + str(seed).encode()
    chunk = struct.pack(">I", len(text)) + b"tEXt" + text + struct.pack(">I", zlib.crc32(b"tEXt" + text))
    return plain[:33] + chunk + plain[33:]            # after the signature and IHDR


@functools.cache
def _grey_png(width: int, height: int) -> bytes:
    return hostile_images.png_with(struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0),
                                   zlib.compress((b"\x00" + b"\x80" * 3 * width) * height, 9))


def streamed(route, images) -> bytes:
    path, body, _ = route(images)
    return post_json(path, {**body, "stream": True})


def test_a_stream_whose_images_decode_long_gets_its_head_and_keepalives_before_its_job(server):
    images = [(large_png(seed), "image/png") for seed in range(LARGE)]
    conn = RawConnection(server.port, timeout=120)
    try:
        conn.send(streamed(chat, images))
        resp = conn.read_response()
    finally:
        conn.close()
    assert resp.status == 200 and resp.header("content-type") == "text/event-stream", resp.body[:300]
    events = parse_sse(resp.body, comments=True)
    assert events[0] == (":", None) and resp.body.endswith(b"data: [DONE]\n\n"), events[:3]   # the notice first
    assert metric(server, "localserve_images_encoded_total") >= LARGE


def test_a_client_gone_while_its_images_decode_makes_no_job(server):
    encoded = metric(server, "localserve_images_encoded_total")
    conn = RawConnection(server.port, timeout=120)
    conn.send(streamed(chat, [(large_png(seed), "image/png") for seed in range(100, 100 + LARGE)]))
    received = conn.read_until(b": prefill")      # the head and a keepalive, while the images decode
    conn.close()
    request_id = request_id_of(received)
    assert server.wait_log(f"({request_id}): the client left while its prompt was built; stopped", timeout=60), \
        server.log[-2000:]
    assert metric(server, "localserve_images_encoded_total") == encoded          # no job: nothing encoded
    path, body, _ = chat([(large_png(7, 64, 64), "image/png")])                 # and the server goes on
    assert request(server.port, post_json(path, body), timeout=60).status == 200


def test_an_image_stb_refuses_after_the_head_went_out_is_an_error_in_the_stream(server):
    images = [(large_png(seed), "image/png") for seed in range(200, 200 + LARGE)]
    resp = request(server.port, streamed(chat, images + [(hostile_images.gif_without_clear_code(), "image/gif")]),
                   timeout=120)
    assert resp.status == 200 and resp.body.startswith(b": prefill"), resp.body[:300]
    (error,) = [data["error"] for _, data in parse_sse(resp.body) if "error" in data]
    assert error["code"] == "invalid_image" and error["param"] == f"messages[0].content[{LARGE + 1}]", error
    assert b"data: [DONE]" not in resp.body


def mp4_head() -> bytes:
    return struct.pack(">I", 24) + b"ftypisom" + b"\x00\x00\x02\x00isomiso2" + struct.pack(">I", 8) + b"mdat"


BAD = [   # (name, bytes, declared type, the code of its 400)
    ("truncated PNG", large_png(1, 512, 512)[:-400], "image/png", "invalid_image"),
    ("PNG header of 100000x100000", hostile_images.png_with(struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0),
                                                           b""), "image/png", "image_too_large"),
    ("BMP declaring 8192x4096 without pixels", hostile_images.bmp_without_pixels(), "image/bmp", None),
    ("GIF screen of 8192x4096", hostile_images.gif_big_screen(), "image/gif", None),
    ("GIF stb refuses", hostile_images.gif_without_clear_code(), "image/gif", "invalid_image"),
    ("WAV declared a PNG", wav_bytes(tone(0.2)), "image/png", "invalid_image"),
    ("MP4 declared a JPEG", mp4_head(), "image/jpeg", "invalid_image"),
]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize("route", [chat, anthropic], ids=lambda r: r.__name__)
def test_a_bad_image_is_still_a_400_before_any_head(server, route, stream):
    for name, data, declared, code in BAD:
        path, body, where = route([(data, declared)])
        reply = request(server.port, post_json(path, {**body, "stream": stream}), timeout=60)
        assert reply.status == 400, (name, reply.body[:300])
        error = reply.json()["error"]
        assert where in error["message"], (name, error)
        if route is chat:
            assert error["param"] == where and (code is None or error["code"] == code), (name, error)
        else:
            assert reply.json()["type"] == "error" and error["type"] == "invalid_request_error", (name, error)


COUNTS = [   # (the route that counts, the request whose body it takes, how its 400 names the part)
    ("/v1/messages/count_tokens", anthropic, lambda body: body["error"]["message"]),
    ("/v1/chat/completions/input_tokens", chat, lambda body: body["error"]["param"]),
    ("/v1/responses/input_tokens", responses, lambda body: body["error"]["param"]),
]


@pytest.mark.parametrize("path,route,named", COUNTS, ids=[c[0] for c in COUNTS])
def test_a_count_of_tokens_decodes_its_images_as_its_request_would(server, path, route, named):
    _, body, where = route([(large_png(9, 64, 64), "image/png")])
    counted = request(server.port, post_json(path, body), timeout=60)
    assert counted.status == 200 and counted.json()["input_tokens"] > 0, counted.body[:300]
    _, body, where = route([(large_png(9, 64, 64), "image/png"), (hostile_images.gif_without_clear_code(), "image/gif")])
    refused = request(server.port, post_json(path, body), timeout=60)
    assert refused.status == 400, refused.body[:300]
    assert where.replace("[1]", "[2]") in named(refused.json()), refused.json()    # stb's refusal, from its thread
