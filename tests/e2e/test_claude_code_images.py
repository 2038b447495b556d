"""Claude Code (the real CLI) reads a PNG with its Read tool on a model without a vision projector,
and its tool loop still finishes.

The scripted model (tests/support/scripted_model.py) calls Read on shot.png, a real PNG
(tests/support/imagefiles.py); Claude Code sends the image back inside the tool_result, as it
does for any image file it reads; the server shows it to the model as the placeholder text
(the model has no vision: an image in a tool result is not a 400) and says so in a header;
the model answers and Claude Code prints the answer. How Claude Code is run offline is
tests/e2e/test_claude_code.py's.
"""

from __future__ import annotations


import pytest

import imagefiles
from agent_clis import claude_binary
from conftest import ServerProcess
from prompt_words import PROMPT_WORDS
from scripted_model import tool_loop_script, write_scripted_gguf
from test_claude_code import CONTEXT, PREFILL_THREADS, claude_print, message_posts

FINAL = "The picture shows a gradient."


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """The project folder, with shot.png; its path is in the script, so it is made first."""
    folder = tmp_path_factory.mktemp("claude-code-images") / "work"
    folder.mkdir()
    (folder / "shot.png").write_bytes(imagefiles.png(64, 48, seed=5))
    return folder


@pytest.fixture(scope="module")
def server(models_dir, work, tmp_path_factory):
    path = write_scripted_gguf(models_dir / "scripted-claude-code-read.gguf", tool_loop_script(
        "Read", {"file_path": str(work / "shot.png")}, FINAL), words=PROMPT_WORDS)
    srv = ServerProcess(path, "--model-id", "scripted", "--ctx-size", str(CONTEXT), "--slots", "1",
                        *PREFILL_THREADS, "--data-dir", str(tmp_path_factory.mktemp("claude-code-images-data")))
    yield srv
    srv.stop()


def test_claude_code_reads_a_png_and_the_loop_finishes_without_vision(server, work):
    claude = claude_binary()
    tap, result = claude_print(claude, server, work.parent, "What is in shot.png?", "--allowedTools", "Read")
    assert result["result"] == FINAL, result

    turns = message_posts(tap)
    assert len(turns) >= 2 and all(t.status == 200 for t in turns), [(t.status, t.response[:300]) for t in turns]
    last = turns[-1]
    results = [block for m in last.json()["messages"] if isinstance(m["content"], list) for block in m["content"]
               if block["type"] == "tool_result"]
    images = [part for block in results if isinstance(block.get("content"), list) for part in block["content"]
              if part["type"] == "image"]
    assert images and images[0]["source"]["type"] == "base64", results      # what Claude Code sends for a PNG
    assert last.response_headers.get("x-localserve-images-omitted") == str(len(images))
    assert server.wait_log("image(s) shown as text: the model has no vision projector")
