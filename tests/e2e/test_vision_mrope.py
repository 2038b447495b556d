"""Images on a model that places them by M-RoPE (the Qwen2-VL family), through the real engine:
a tiny qwen2vl text model with a tiny qwen2vl_merger projector (tests/support/tinyvision.py).
An image of w x h tokens takes max(w, h) positions, so every token after it sits at a position
less than its index (generation.position_of); the answers equal libmtmd's own evaluation of
the same prompt (bench/bare_vision.py) for an image in the middle of the prompt, two images,
and a next turn that continues the cached sequence past an image."""

from __future__ import annotations

import llama_cpp.mtmd_cpp as mtmd

from localserve.conversation import Image, Message, Text
from tinyvision import QWEN2VL_TEXT, checkerboard, png_bytes, solid, write_tiny_qwen2vl_mmproj  # tests/support/
from vision_engine import ask, assert_same_as_bare, images_encoded, projector_fixtures, run

WIDE = png_bytes(checkerboard(100, 40, cell=6))         # not square: more tokens than positions
TALL = png_bytes(solid(30, 90, (20, 200, 90)))


files, model, bare = projector_fixtures(write_tiny_qwen2vl_mmproj, name="qwen", n_ctx=1024, **QWEN2VL_TEXT)


def test_the_projector_places_images_by_mrope_with_fewer_positions_than_tokens(model):
    assert mtmd.mtmd_decode_use_mrope(model.engine.projector.ctx)
    request, _ = run(model, ask(WIDE))
    [image] = request.images
    assert image.saved_positions > 0


def test_an_image_mid_prompt_is_answered_as_libmtmd_answers_it(model, bare):
    messages = ask(WIDE, "what is this?")
    _, output = run(model, messages)
    assert_same_as_bare(model, bare, messages, output, tolerance=1e-4)


def test_two_images_in_one_prompt(model, bare):
    messages = [Message("user", (Text("first"), Image(data=WIDE, media_type="image/png"), Text("then"),
                                 Image(data=TALL, media_type="image/png"), Text("compare them")))]
    request, output = run(model, messages)
    assert len(request.images) == 2
    assert_same_as_bare(model, bare, messages, output, tolerance=1e-4)


def test_the_next_turn_continues_the_cached_sequence_past_the_image(model, bare):
    turn = ask(TALL, "a tall one")
    request, first = run(model, turn)
    encoded = images_encoded(model)
    follow = turn + [Message("assistant", (Text(first.content),)), Message("user", (Text("and?"),))]
    _, second = run(model, follow)
    assert second.cached_tokens > request.images[0].end and images_encoded(model) == encoded
    assert_same_as_bare(model, bare, follow, second, tolerance=1e-4)
