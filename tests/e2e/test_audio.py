"""Audio through the real engine and the tiny audio projector (tests/support/tinyaudio.py), below
the dialects: the model loads with an audio projector (models/loaded.py), a conversation with a
clip renders through the chat template to the media marker, the prompt becomes text and audio
chunks (prompt/media.py, audio_media.py, engine/audio.py) and the runtime evaluates each chunk
between decode steps as it does an image (runtime/images.py). The reference is
bench/bare_vision.py: libmtmd's own decode, tokenize and eval of the same prompt text and the
client's own bytes, greedy token for token."""

from __future__ import annotations

import threading

import pytest

from localserve import audio
from localserve.engine import audio as engine_audio
from localserve.engine.facade import DecodeStopped
from localserve.conversation import Message, Text
from localserve.engine.audio import shortest_clip
from localserve.generation import PromptRefused
from localserve.prompt.build import ChatInput, build_chat_request, render_chat
from tinyaudio import SAMPLE_RATE, audio_tokens, tone, wav_bytes, write_tiny_audio_mmproj
from tinymodel import EOG_TEXTS, token_ids  # tests/support/
from vision_engine import N_TOKENS, greedy, log_softmax, projector_fixtures, run

CLIP = wav_bytes(tone(1.0))
SWEEP = wav_bytes(tone(2.0, freq=200, glide=600))


files, model, bare = projector_fixtures(write_tiny_audio_mmproj, n_ctx=1024)


def hear(*clips: bytes, text: str = "what is this?") -> list[Message]:
    return [Message("user", (Text(text), *(audio.from_bytes(c, "wav", where=f"clip{i}") for i, c in enumerate(clips))))]


def same_as_bare(model, bare, messages, clips: list[bytes], output) -> None:
    text = render_chat(model.chat.template, ChatInput(messages))
    banned = {token_ids()[t] for t in EOG_TEXTS}
    tokens = bare.greedy(text, clips, N_TOKENS, banned)
    bare.prefill(text, clips)
    assert output.content == model.chat.engine.detokenize(tokens)
    assert output.logprobs[0]["logprob"] == pytest.approx(log_softmax(bare.logits())[tokens[0]], abs=1e-3)


def test_the_projector_loads_with_audio_and_no_vision(model):
    assert model.chat.engine.has_audio and not model.chat.engine.has_vision
    assert model.chat.audio and not model.chat.vision


def test_a_clip_gives_the_bare_engine_s_tokens_and_logprobs(model, bare):
    messages = hear(SWEEP)
    request, output = run(model, messages)
    [chunk] = request.images
    assert chunk.n_tokens == audio_tokens() and request.prompt_tokens[chunk.start] < 0
    same_as_bare(model, bare, messages, [SWEEP], output)
    assert output.prompt_tokens == len(request.prompt_tokens)


def test_two_clips_and_a_long_one_in_windows(model, bare):
    long = wav_bytes(tone(31.0, freq=300, amplitude=0.3))
    messages = hear(CLIP, long)
    request, output = run(model, messages)
    assert [c.n_tokens for c in request.images] == [audio_tokens()] * 3       # 1 s: one window; 31 s: two
    same_as_bare(model, bare, messages, [CLIP, long], output)


def audio_encoded(model) -> float:
    return sum(v for _, v in model.metrics.audio_encoded.samples_by_key())


def test_a_repeated_clip_comes_from_the_cache(model):
    messages = hear(wav_bytes(tone(1.5, freq=660)))
    before = audio_encoded(model)
    run(model, messages)
    assert audio_encoded(model) == before + 1
    assert sum(v for _, v in model.metrics.images_encoded.samples_by_key()) == 0
    _, output = run(model, messages)
    assert audio_encoded(model) == before + 1           # not encoded again
    assert output.cached_tokens > audio_tokens()


def test_a_clip_libmtmd_decodes_to_too_few_samples_is_refused_before_tokenizing(model):
    """One sample (one 16 kHz frame, or three at 44.1 kHz resampled): mtmd_tokenize would assert
    GGML_ASSERT(buf.size() > sizeof(float)) and end the process; fewer than two hops (LFM2-Audio's
    conformer log-mel asserts GGML_ASSERT(effective_n_len > 1)): MIN_CLIP_SECONDS holds every
    encoder's front end, one sample fewer is refused and the shortest clip taken."""
    shortest = shortest_clip(SAMPLE_RATE)
    assert shortest >= 2 * 160 * 2         # two hops of 10 ms at 16 kHz, twice over
    for clip in (wav_bytes([0.5]), wav_bytes([0.5] * 3, rate=44100), wav_bytes([0.5, -0.5] * 160),
                 wav_bytes(tone(1.0)[:shortest - 1])):
        one = audio.from_bytes(clip, "wav", where="messages[0].content[1]")
        with pytest.raises(PromptRefused) as caught:
            build_chat_request(model.chat, ChatInput([Message("user", (Text("x"), one))]), greedy(), max_tokens=4,
                               stop=[])
        assert caught.value.code == "audio_too_short" and caught.value.param == "messages[0].content[1]"
    _, output = run(model, hear(wav_bytes(tone(1.0)[:shortest])))
    assert output.completion_tokens == N_TOKENS


def test_other_rates_channels_and_sample_sizes_hear_the_same_clip(model, bare):
    for clip in (wav_bytes(tone(1.0, rate=8000), rate=8000), wav_bytes([s for s in tone(1.0) for _ in (0, 1)], channels=2),
                 wav_bytes(tone(1.0), bits=-32), wav_bytes(tone(1.0), bits=8)):
        messages = hear(clip)
        _, output = run(model, messages)
        same_as_bare(model, bare, messages, [clip], output)


def test_a_stop_set_before_the_decode_or_during_it_stops_it_before_the_log_mel(model, monkeypatch):
    # dialects/media_wait.py sets the stop when the client leaves; the decode looks between its steps
    engine, stop = model.chat.engine, threading.Event()
    stop.set()
    with pytest.raises(DecodeStopped, match="before its decode"):
        engine.audio_segments(CLIP, stop)
    stop.clear()
    decoded = engine_audio._check_decoded
    monkeypatch.setattr(engine_audio, "_check_decoded", lambda *a: (decoded(*a), stop.set()))  # the client leaves
    tokenized = []
    projector = model.chat.engine._engine.projector
    monkeypatch.setattr(projector, "segments_of", lambda *a: tokenized.append(a))
    with pytest.raises(DecodeStopped, match="after its decode, before its log-mel"):
        engine.audio_segments(CLIP, stop)
    assert not tokenized
    monkeypatch.undo()
    assert len(engine.audio_segments(CLIP, threading.Event())) >= 1       # and the next decode runs
