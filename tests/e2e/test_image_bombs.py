"""Images that cost a decoder far more than their bytes, on every route that takes images (issue 44
items 1 and 2), against the tiny model with the tiny vision projector.

Each crafted image (tests/support/hostile_images.py) is a 400 naming its part before libmtmd
sees it, on chat, Anthropic (an image block and one inside a tool_result), Responses, Ollama's
chat and generate `images`, and /v1/completions' multimodal_data; what the server spent on it is
read from /proc (its CPU time, its children's, its peak RSS reset before each request), never
from a clock. A fake ffprobe and ffmpeg on the server's PATH write a file if anything runs them:
none ever does, and the server never has a child process. Valid images of every format,
progressive JPEGs with a sane scan count among them, are still read.
"""

from __future__ import annotations

import base64
import os
import socket
import stat
from pathlib import Path

import pytest

import hostile_images
import imagefiles
from conftest import ServerProcess
from rawhttp import post_json, request
from tinyvision import write_tiny_mmproj

CPU_SECONDS = 0.6            # a refusal costs the server a header read: far below one bomb's decode
PEAK_BYTES = 48 << 20        # nor does it allocate what the bomb declares

FAKE_TOOL = """#!/bin/sh
echo "$0 $*" >> {marker}
cat > /dev/null
"""


@pytest.fixture(scope="module")
def marker(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("ran") / "programs-run.txt"


@pytest.fixture(scope="module")
def server(tiny_model, tmp_path_factory, marker):
    """The vision server, with an ffprobe and an ffmpeg on its PATH that leave a mark when run."""
    tools = tmp_path_factory.mktemp("bin")
    for name in ("ffprobe", "ffmpeg"):
        path = tools / name
        path.write_text(FAKE_TOOL.format(marker=marker))
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    mmproj = write_tiny_mmproj(tmp_path_factory.mktemp("mmproj") / "mmproj-tiny.gguf")
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--slots", "2", "--mmproj", str(mmproj),
                        env={"PATH": f"{tools}:{os.environ['PATH']}",
                             "XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


# ---- what the server spent, from /proc --------------------------------------------------

def cpu_seconds(pid: int) -> float:
    """The process's CPU time and its waited-for children's (an ffmpeg's would count)."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rpartition(")")[2].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def peak_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def children(pid: int) -> list[str]:
    found = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found += handle.read().split()
        except FileNotFoundError:          # a connection thread that has ended
            pass
    return found


class Spent:
    """CPU seconds and peak RSS growth of the server over a block (its peak reset at the start)."""

    def __init__(self, pid: int):
        self.pid = pid

    def __enter__(self) -> "Spent":
        with open(f"/proc/{self.pid}/clear_refs", "w") as handle:
            handle.write("5")            # VmHWM back to the RSS of now
        self.rss, self.cpu = peak_rss(self.pid), cpu_seconds(self.pid)
        return self

    def __exit__(self, *exc) -> None:
        self.cpu = cpu_seconds(self.pid) - self.cpu
        self.peak = peak_rss(self.pid) - self.rss


# ---- the routes that take images ----------------------------------------------------------

def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def chat(images: list[tuple[bytes, str]]) -> tuple[str, dict, str]:
    parts = [{"type": "image_url", "image_url": {"url": f"data:{mt};base64,{b64(d)}"}} for d, mt in images]
    return ("/v1/chat/completions", {"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "look"}] + parts}]}, "messages[0].content[1]")


def anthropic(images):
    parts = [{"type": "image", "source": {"type": "base64", "media_type": mt, "data": b64(d)}} for d, mt in images]
    return ("/v1/messages", {"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "look"}] + parts}]}, "messages[0].content[1]")


def anthropic_tool_result(images):
    parts = [{"type": "image", "source": {"type": "base64", "media_type": mt, "data": b64(d)}} for d, mt in images]
    return ("/v1/messages", {"model": "tiny", "max_tokens": 2, "tools": [
        {"name": "screenshot", "input_schema": {"type": "object"}}], "messages": [
        {"role": "user", "content": "take a screenshot"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "screenshot", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": parts}]}]},
        "messages[2].content[0].content[0]")


def responses(images):
    parts = [{"type": "input_image", "image_url": f"data:{mt};base64,{b64(d)}"} for d, mt in images]
    return ("/v1/responses", {"model": "tiny", "max_output_tokens": 16, "store": False, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "look"}] + parts}]}, "input[0].content[1]")


def ollama_chat(images):
    return ("/api/chat", {"model": "tiny", "stream": False, "options": {"num_predict": 2}, "messages": [
        {"role": "user", "content": "look", "images": [b64(d) for d, _ in images]}]}, "messages[0].images[0]")


def ollama_generate(images):
    return ("/api/generate", {"model": "tiny", "stream": False, "prompt": "look", "options": {"num_predict": 2},
                              "images": [b64(d) for d, _ in images]}, "images[0]")


def completions(images):
    return ("/v1/completions", {"model": "tiny", "max_tokens": 2, "prompt": {
        "prompt_string": "look " + "<__media__> " * len(images) + "now",
        "multimodal_data": [b64(d) for d, _ in images]}}, "prompt.multimodal_data[0]")


ROUTES = [chat, anthropic, anthropic_tool_result, responses, ollama_chat, ollama_generate, completions]

BOMBS = {
    "progressive JPEG, 1000 empty scans": (hostile_images.progressive_scans(2048, 1000), "image/jpeg"),
    "54-byte BMP declaring 8192x4096": (hostile_images.bmp_without_pixels(), "image/bmp"),
    "GIF with an 8192x4096 screen and a 1x1 frame": (hostile_images.gif_big_screen(), "image/gif"),
    "GIF with a 4096x4096 screen and a 1x1 frame": (hostile_images.gif_big_screen(4096, 4096), "image/gif"),
    "GIF whose first frame stb refuses": (hostile_images.gif_frame_outside(), "image/gif"),
    "GIF whose LZW names 4090-pixel strings past its frame": (hostile_images.gif_lzw_chains(64, 20), "image/gif"),
    "16-bit RGBA PNG, 16 megapixels": (hostile_images.png16(), "image/png"),
    "1x1 PNG inflating to 64 MiB": (hostile_images.png_inflating(), "image/png"),
}


def post(server, route, images):
    path, body, where = route(images)
    return request(server.port, post_json(path, body), timeout=60), where


def assert_refused(resp, where: str) -> None:
    assert resp.status == 400, resp.body[:500]
    assert where in resp.body.decode(), resp.body[:500]


@pytest.mark.parametrize("bomb", sorted(BOMBS))
@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_a_decode_bomb_is_a_400_naming_its_part_for_next_to_nothing(server, marker, route, bomb):
    with Spent(server.proc.pid) as spent:
        resp, where = post(server, route, [BOMBS[bomb]])
    assert_refused(resp, where)
    assert spent.cpu < CPU_SECONDS and spent.peak < PEAK_BYTES, (spent.cpu, spent.peak >> 20)
    assert not marker.exists() and children(server.proc.pid) == []


def test_a_hundred_bmps_without_pixels_in_one_request_cost_nothing(server):
    with Spent(server.proc.pid) as spent:
        resp, where = post(server, chat, [BOMBS["54-byte BMP declaring 8192x4096"]] * 100)
    assert_refused(resp, where)
    assert spent.cpu < CPU_SECONDS and spent.peak < PEAK_BYTES, (spent.cpu, spent.peak >> 20)


@pytest.mark.parametrize("route", [chat, ollama_generate, completions], ids=lambda r: r.__name__)
def test_a_request_past_its_pixel_budget_is_refused_before_any_decode(server, route):
    """Nine distinct 16-megapixel JPEGs (each within the per-image limits) are 150 megapixels:
    past MAX_REQUEST_PIXELS, refused before the first is decoded."""
    images = [(hostile_images.progressive_scans(4096, 1, level=i), "image/jpeg") for i in range(9)]
    with Spent(server.proc.pid) as spent:
        resp, _ = post(server, route, images)
    assert resp.status == 400 and "MAX_REQUEST_PIXELS" in resp.body.decode(), resp.body[:500]
    assert spent.cpu < CPU_SECONDS * 2 and spent.peak < PEAK_BYTES, (spent.cpu, spent.peak >> 20)


def test_an_image_stb_cannot_read_starts_no_program(server, marker):
    """Bytes that pass the header checks but that stb refuses: a 400, and with an ffprobe and an
    ffmpeg on PATH neither runs (a libmtmd with video ran both on such bytes)."""
    unreadable = hostile_images.gif_without_clear_code()
    for route in ROUTES:
        resp, where = post(server, route, [(unreadable, "image/gif")])
        assert_refused(resp, where)
        assert "could not decode" in resp.body.decode()
    assert not marker.exists()
    assert children(server.proc.pid) == []
    assert "could not decode" in server.log or "failed to decode" in server.log


def test_a_client_that_leaves_stops_the_decoding_and_no_job_runs(server):
    """A request with six large images whose client is gone once it has sent it: the server
    stops before decoding them (it asks after the client between images) and makes no job."""
    images = [(imagefiles.progressive_jpeg(2048, 2048, seed=i), "image/jpeg") for i in range(6)]
    path, body, _ = chat(images)
    with Spent(server.proc.pid) as spent:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(post_json(path, body))
        sock.close()
        assert server.wait_log("the client left while its prompt was built; stopped", timeout=30)
    assert spent.cpu < CPU_SECONDS * 2, spent.cpu


@pytest.mark.parametrize("route", ROUTES, ids=lambda r: r.__name__)
def test_valid_images_of_every_format_are_still_read(server, route):
    """Progressive, with restart markers and interlaced among them."""
    images = [(imagefiles.progressive_jpeg(40, 24, seed=3, ac_scans=5), "image/jpeg"),
              (imagefiles.jpeg(40, 24, seed=4, restart=3), "image/jpeg"),
              (imagefiles.png(21, 13, seed=6, interlaced=True), "image/png"),
              (imagefiles.compressed_gif(1000, 400, seed=7), "image/gif")] + [
        (write(48, 32, seed=5), media_type) for media_type, write in sorted(imagefiles.WRITERS.items())]
    path, body, _ = route(images)
    resp = request(server.port, post_json(path, body), timeout=60)
    assert resp.status == 200, resp.body[:500]
