"""Claude Code (the real CLI) reads a PNG with its Read tool on a model WITH a vision projector,
and its tool loop finishes: the image inside the tool_result is encoded and decoded into the
sequence (no placeholder, no images-omitted header), then the scripted model answers.

The scripted model's attention is zero (tests/support/scripted_model.py), so the image's
positions do not change what it says: the loop is the test, as in
test_claude_code_images.py (the same loop without a projector).
"""

from __future__ import annotations

import re

import pytest

import imagefiles
from agent_clis import claude_binary
from conftest import ServerProcess
from rawhttp import request
from prompt_words import PROMPT_WORDS
from scripted_model import tool_loop_script, write_scripted_gguf
from test_claude_code import CONTEXT, PREFILL_THREADS, claude_print, message_posts
from tinyvision import write_tiny_mmproj

from localserve.engine.gguf_meta import read_shape

FINAL = "The picture shows a gradient."


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    folder = tmp_path_factory.mktemp("claude-code-vision") / "work"
    folder.mkdir()
    (folder / "shot.png").write_bytes(imagefiles.png(64, 48, seed=6))
    return folder


@pytest.fixture(scope="module")
def server(models_dir, work, tmp_path_factory):
    path = write_scripted_gguf(models_dir / "scripted-claude-code-vision.gguf", tool_loop_script(
        "Read", {"file_path": str(work / "shot.png")}, FINAL), words=PROMPT_WORDS)
    mmproj = write_tiny_mmproj(models_dir / "mmproj-scripted-claude-code-vision.gguf",
                               n_embd_text=read_shape(str(path)).n_embd)
    srv = ServerProcess(path, "--model-id", "scripted", "--ctx-size", str(CONTEXT), "--slots", "1",
                        "--mmproj", str(mmproj), *PREFILL_THREADS,
                        "--data-dir", str(tmp_path_factory.mktemp("claude-code-vision-data")))
    yield srv
    srv.stop()


def images_encoded(server) -> float:
    body = request(server.port, b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").body
    found = re.search(r"^localserve_images_encoded_total ([0-9.e+]+)$", body.decode(), re.M)
    return float(found.group(1)) if found else 0.0


def test_claude_code_reads_a_png_and_the_loop_finishes_with_vision(server, work):
    claude = claude_binary()
    tap, result = claude_print(claude, server, work.parent, "What is in shot.png?", "--allowedTools", "Read")
    assert result["result"] == FINAL, result
    last = message_posts(tap)[-1]
    assert last.status == 200 and "x-localserve-images-omitted" not in last.response_headers
    assert images_encoded(server) >= 1
