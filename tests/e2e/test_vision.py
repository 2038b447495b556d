"""Images through the real engine and the tiny vision projector (tests/support/tinyvision.py),
below the dialects: the model loads with --mmproj's projector (models/loaded.py), a conversation
with an image part renders through the chat template to the media marker, the prompt becomes
text and image chunks (prompt/media.py), and the runtime evaluates the image between decode
steps (runtime/images.py). The reference is bench/bare_vision.py: libmtmd's own tokenize and
eval of the same prompt text, greedy token for token."""

from __future__ import annotations

import threading

import pytest

import imagefiles
from localserve.engine.facade import DecodeStopped
from localserve.conversation import Image, Message, Text, ToolCall, ToolResult, images_in
from localserve.generation import PromptRefused
from localserve.dialects import image_parts
from localserve.dialects.responses.compaction_steps import compaction_messages
from localserve.dialects.responses.request import read_plan
from localserve.prompt.build import ChatInput, build_chat_request, render_chat
from tinymodel import CHATML_TEMPLATE, EOG_TEXTS, token_ids, write_tiny_gguf  # tests/support/
from tinyvision import IMAGE_TOKENS, checkerboard, png_bytes, solid, write_tiny_mmproj
from vision_engine import (N_TOKENS, ask, assert_same_as_bare, bare_reference, bare_tokens, greedy,
                           images_encoded, loaded_with_projector, projector_fixtures, run)

PNG = png_bytes(checkerboard(20, 12))
OTHER_PNG = png_bytes(solid(20, 12, (200, 30, 30)))


files, model, bare = projector_fixtures(write_tiny_mmproj)


def test_the_projector_loads_with_its_model(model):
    assert model.chat.engine.has_vision
    assert model.engine.projector.path.endswith("mmproj-tiny.gguf")


def test_an_image_gives_the_bare_engine_s_tokens_and_logprobs(model, bare):
    messages = ask(PNG)
    request, output = run(model, messages)
    [image] = request.images
    assert image.n_tokens == IMAGE_TOKENS and request.prompt_tokens[image.start] < 0
    assert_same_as_bare(model, bare, messages, output)
    assert output.prompt_tokens == len(request.prompt_tokens)     # image positions counted


def test_two_images_give_different_answers(model, bare):
    _, a = run(model, ask(PNG, "compare"))
    _, b = run(model, ask(OTHER_PNG, "compare"))
    assert [e["logprob"] for e in a.logprobs] != [e["logprob"] for e in b.logprobs]
    assert model.chat.engine.detokenize(bare_tokens(model, bare, ask(OTHER_PNG, "compare"))[0]) == b.content


def test_the_next_turn_with_the_same_image_reuses_its_positions_without_encoding_it(model, bare):
    first_turn = ask(PNG, "a screenshot")
    request, first = run(model, first_turn)
    encoded = images_encoded(model)
    second_turn = first_turn + [Message("assistant", (Text(first.content),)), Message("user", (Text("and?"),))]
    request2, second = run(model, second_turn)
    assert images_encoded(model) == encoded               # served from the slot's KV
    assert second.cached_tokens >= request.images[0].end
    tokens, _ = bare_tokens(model, bare, second_turn)
    assert second.content == model.chat.engine.detokenize(tokens)
    # the same conversation again: the same answer, from the cache
    _, again = run(model, second_turn)
    assert again.content == second.content and again.cached_tokens == len(request2.prompt_tokens) - 1


def test_an_image_in_a_tool_result_is_read_too(model, bare):
    messages = [Message("user", (Text("take a screenshot"),)),
                Message("assistant", (ToolCall("call_1", "screenshot", {}),)),
                Message("tool", (ToolResult("call_1", (Image(media_type="image/png", data=OTHER_PNG),
                                                       Text("the screen"))),))]
    request, output = run(model, messages)
    assert len(request.images) == 1
    text = render_chat(model.chat.template, ChatInput(messages))
    tokens = bare.greedy(text, [OTHER_PNG], N_TOKENS, {token_ids()[t] for t in EOG_TEXTS})
    assert output.content == model.chat.engine.detokenize(tokens)


def test_bytes_that_are_no_image_are_refused_before_the_runtime(model):
    with pytest.raises(PromptRefused) as caught:
        build_chat_request(model.chat, ChatInput(ask(b"GIF89a not really")), greedy(), max_tokens=1, stop=[])
    assert caught.value.code == "invalid_image"


def test_a_stop_set_before_the_decode_or_during_it_stops_it_before_the_preprocessing(model, monkeypatch):
    # dialects/media_wait.py sets the stop when the client leaves; the decode looks between its steps
    engine, stop = model.chat.engine, threading.Event()
    stop.set()
    with pytest.raises(DecodeStopped, match="before its decode"):
        engine.image_segments(PNG, stop)
    stop.clear()
    projector = engine._engine.projector
    bitmap = projector._bitmap
    monkeypatch.setattr(projector, "_bitmap", lambda data: (bitmap(data), stop.set())[0])   # the client leaves
    preprocessed = []
    monkeypatch.setattr(projector, "segments_of", lambda *a: preprocessed.append(a))
    with pytest.raises(DecodeStopped, match="after its decode, before its preprocessing"):
        engine.image_segments(PNG, stop)
    assert not preprocessed
    monkeypatch.undo()
    assert len(engine.image_segments(PNG, threading.Event())) >= 1       # and the next decode runs


def test_text_that_looks_like_a_marker_is_only_text(model):
    request, _ = run(model, [Message("user", (Text("<__media__> <__image__>"),))])
    assert request.images == [] and min(request.prompt_tokens) >= 0


def test_an_image_conversation_evicted_from_its_slot_comes_back_from_the_ram_cache(model):
    conversation = ask(PNG, "a long look at this screenshot, please")
    request, first = run(model, conversation)
    encoded = images_encoded(model)
    # two other conversations take both slots: the image's sequence goes to the RAM cache
    for text in ("x " * 40, "y " * 40):
        run(model, [Message("user", (Text(text),))])
    assert len(model.runtime.cache) >= 1
    _, again = run(model, conversation)
    assert again.content == first.content
    assert again.cached_tokens >= request.images[0].end
    assert images_encoded(model) == encoded


def test_with_a_draft_model_an_image_prompt_answers_as_the_bare_engine(files, bare):
    with loaded_with_projector("drafting", *files, ctx_size=512, slots=1, speculative="draft",
                               draft_model=files[0]) as drafting:
        messages = ask(PNG, "drafted?")
        _, output = run(drafting, messages)
        assert output.content == drafting.chat.engine.detokenize(bare_tokens(drafting, bare, messages)[0])


def test_a_large_image_is_decoded_in_parts_and_answers_as_the_bare_engine(tmp_path):
    """576 positions with --batch-size 64: the image is encoded once and its embeddings decoded in
    nine parts, a step each (runtime/images.py); the answer is libmtmd's own, token for token."""
    path = str(write_tiny_gguf(tmp_path / "tiny.gguf", chat_template=CHATML_TEMPLATE, context_length=4096))
    mmproj = str(write_tiny_mmproj(tmp_path / "mmproj-large.gguf", n_embd=64, n_head=2, n_ff=96, n_layer=2,
                                   image_size=336, patch_size=14))
    with loaded_with_projector("large", path, mmproj, ctx_size=2048, slots=1, batch_size=64) as large, \
            bare_reference(path, mmproj, n_ctx=2048) as bare:
        assert large.engine.projector.splits(large.engine.projector.image_segments(PNG)[0])
        messages = ask(PNG, "a large look")
        request, output = run(large, messages)
        assert request.images[0].n_tokens == 576
        assert_same_as_bare(large, bare, messages, output)
        assert images_encoded(large) == 1


def test_a_responses_input_image_is_decoded_once(model, monkeypatch):
    """Read (checked) and rendered, each image of a Responses input is decoded once: the data URL
    decoder, wrapped, is called once per image, and the job holds both images."""
    decoded = []
    real = image_parts.read_data_url
    monkeypatch.setattr(image_parts, "read_data_url", lambda url, where="": decoded.append(where) or real(url, where))
    image = {"type": "input_image", "image_url": imagefiles.data_url(PNG)}
    body = {"model": "tiny", "store": False, "max_output_tokens": 2, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "look"}, image]},
        {"type": "function_call", "call_id": "call_1", "name": "screenshot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": [{**image, "image_url": imagefiles.data_url(
            OTHER_PNG)}]}]}
    plan = read_plan(body, "req-1", chat_model=model.chat, model_id="tiny", signing_key=b"k" * 32, store=None)
    assert len(plan.generation.images) == 2
    assert decoded == ["input[0].content[1]", "input[2].output[0]"]


def test_a_template_that_writes_the_bos_is_answered_as_the_bare_engine(files, tmp_path):
    """The template prints bos_token: the prompt holds one BOS, here and in the reference (which
    takes the written one away, as llama-server's chat code does), so both answer alike."""
    path = str(write_tiny_gguf(tmp_path / "writes-bos.gguf", chat_template="{{ bos_token }}" + CHATML_TEMPLATE))
    with loaded_with_projector("writes-bos", path, files[1], ctx_size=512, slots=1) as model, \
            bare_reference(path, files[1], n_ctx=512) as reference:
        messages = ask(PNG)
        request, output = run(model, messages)
        bos = request.prompt_tokens[0]
        assert bos == token_ids()["<s>"] and request.prompt_tokens[1] != bos
        positions, _ = reference.prefill(render_chat(model.chat.template, ChatInput(messages)), [PNG])
        assert positions == len(request.prompt_tokens)
        assert_same_as_bare(model, reference, messages, output)


def test_after_a_compaction_trigger_input_images_keep_their_places_and_are_decoded_once(model, monkeypatch):
    """A compaction_trigger mid-input: the images after it are named by their own places in
    `input` (the names a refusal gives), and the conversation the compaction summarises takes
    every image as it was read, decoding none again."""
    decoded = []
    real = image_parts.read_data_url
    monkeypatch.setattr(image_parts, "read_data_url", lambda url, where="": decoded.append(where) or real(url, where))
    image = {"type": "input_image", "image_url": imagefiles.data_url(PNG)}
    body = {"model": "tiny", "store": False, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "look"}, image]},
        {"type": "compaction_trigger"},
        {"role": "assistant", "content": "A checkerboard."},
        {"role": "user", "content": [{"type": "input_text", "text": "and this"},
                                     {**image, "image_url": imagefiles.data_url(OTHER_PNG)}]}]}
    plan = read_plan(body, "req-1", chat_model=model.chat, model_id="tiny", signing_key=b"k" * 32, store=None)
    assert plan.triggered and plan.generation is None
    places = ["input[0].content[1]", "input[3].content[1]"]
    assert decoded == places
    messages = compaction_messages(plan)
    assert [shown.where for shown in images_in(messages)] == places
    assert [m.role for m in messages] == ["user", "assistant", "user"]
    assert decoded == places
