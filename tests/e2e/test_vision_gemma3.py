"""Images on a model whose projector decodes them with attention both ways (Gemma 3), through the
real engine: a tiny gemma3 text model with a tiny gemma3 projector (tests/support/tinyvision.py),
every image GEMMA3_IMAGE_TOKENS tokens. libmtmd must decode such an image in one batch (split
into batches, each part would attend only to those before it: another image than the model was
trained on), so:

- with a batch that holds the image, the answer equals libmtmd's own evaluation of the same
  prompt (bench/bare_vision.py);
- with --batch-size below the image's tokens, the server warns at load, and a request with an
  image is a 400 in each dialect's own shape naming the tokens and the --batch-size to start
  with; the server goes on serving.
"""

from __future__ import annotations

import llama_cpp.mtmd_cpp as mtmd
import pytest

import imagefiles
from conftest import ServerProcess
from rawhttp import post_json, request
from tinymodel import CHATML_TEMPLATE, write_tiny_gguf  # tests/support/
from tinyvision import GEMMA3_TEXT, checkerboard, png_bytes, write_tiny_gemma3_mmproj
from vision_engine import ask, assert_same_as_bare, bare_reference, loaded_with_projector, run

GEMMA3_IMAGE_TOKENS = 64             # write_tiny_gemma3_mmproj's default: (64 / 4 / 2)²
PICTURE = png_bytes(checkerboard(50, 40, cell=6))
SMALL_BATCH = 32


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("gemma3")
    return (str(write_tiny_gguf(d / "tiny-gemma3.gguf", chat_template=CHATML_TEMPLATE, **GEMMA3_TEXT)),
            str(write_tiny_gemma3_mmproj(d / "mmproj-tiny-gemma3.gguf")))


def test_an_image_the_batch_holds_exactly_is_answered_as_libmtmd_answers_it(files):
    with loaded_with_projector("gemma3", *files, ctx_size=1024, slots=2,
                               batch_size=GEMMA3_IMAGE_TOKENS) as model, bare_reference(*files, n_ctx=1024) as bare:
        assert mtmd.mtmd_decode_use_non_causal(model.engine.projector.ctx, None)
        request_, output = run(model, ask(PICTURE))
        [image] = request_.images
        assert image.n_tokens == GEMMA3_IMAGE_TOKENS
        assert_same_as_bare(model, bare, ask(PICTURE), output, tolerance=1e-4)


@pytest.fixture(scope="module")
def small_batch_server(files, tmp_path_factory):
    model, mmproj = files
    srv = ServerProcess(model, "--model-id", "tiny", "--mmproj", mmproj, "--batch-size", str(SMALL_BATCH),
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


def test_the_server_warns_at_load_that_its_batch_cannot_hold_an_image(small_batch_server):
    assert small_batch_server.wait_log(f"its images take at least {GEMMA3_IMAGE_TOKENS} tokens each")
    assert f"--batch-size {GEMMA3_IMAGE_TOKENS} or more" in small_batch_server.log


URL = imagefiles.data_url(PICTURE)
B64 = imagefiles.b64(PICTURE)
REQUESTS = {
    "chat": ("/v1/chat/completions", {"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what?"}, {"type": "image_url", "image_url": {"url": URL}}]}]},
        "messages[0].content[1]"),
    "anthropic": ("/v1/messages", {"model": "tiny", "max_tokens": 2, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "what?"}, {"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": B64}}]}]},
        "messages[0].content[1]"),
    "responses": ("/v1/responses", {"model": "tiny", "max_output_tokens": 16, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "what?"}, {"type": "input_image", "image_url": URL}]}]},
        "input[0].content[1]"),
    "ollama": ("/api/chat", {"model": "tiny", "stream": False, "messages": [
        {"role": "user", "content": "what?", "images": [B64]}]},
        "messages[0].images[0]"),
}


def error_message(body: dict) -> str:
    error = body["error"]
    return error if isinstance(error, str) else error["message"]


@pytest.mark.parametrize("dialect", REQUESTS)
def test_an_image_larger_than_the_batch_is_a_400_and_the_server_goes_on(small_batch_server, dialect):
    path, body, where = REQUESTS[dialect]
    resp = request(small_batch_server.port, post_json(path, body))
    assert resp.status == 400, resp.body
    message = error_message(resp.json())
    assert f"{GEMMA3_IMAGE_TOKENS} tokens" in message and f"--batch-size {GEMMA3_IMAGE_TOKENS} or more" in message
    assert where in message
    if dialect in ("chat", "responses"):
        error = resp.json()["error"]
        assert (error["code"], error["param"]) == ("image_too_large_for_batch", where)
    if dialect == "anthropic":
        assert resp.json()["type"] == "error" and resp.json()["error"]["type"] == "invalid_request_error"
    text = request(small_batch_server.port, post_json("/v1/chat/completions", {
        "model": "tiny", "max_tokens": 2, "messages": [{"role": "user", "content": "hello"}]}))
    assert text.status == 200, text.body
    assert small_batch_server.proc.poll() is None
