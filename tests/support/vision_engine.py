"""In-process image and audio tests below the dialects: a model loaded with its projector
(models/loaded.py), a conversation run through its runtime, and libmtmd's own answer to the same
prompt (bench/bare_vision.py), greedy token for token, to compare with."""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np
import pytest

from bench.bare_vision import BareVision
from localserve.conversation import Image, Message, Text
from localserve.generation import MEDIA_MARKER, Finished, SamplingParams
from localserve.models.catalogue import ModelEntry
from localserve.models.loaded import load
from localserve.ops.metrics import ServerMetrics
from localserve.prompt.build import ChatInput, build_chat_request, render_chat
from localserve.settings import Settings
from tinymodel import CHATML_TEMPLATE, EOG_TEXTS, NO_EOG, token_ids, write_tiny_gguf

N_TOKENS = 10


def projector_fixtures(write_mmproj, *, name: str = "tiny", n_ctx: int = 512, **model_args):
    """A module's fixtures `files` (a tiny ChatML model written with model_args, and the projector
    write_mmproj writes, as mmproj-<name>.gguf), `model` (the two loaded as the server loads them,
    two slots and a RAM cache) and `bare` (libmtmd's reference for the pair): assign them to
    those three names in the module."""
    @pytest.fixture(scope="module", name="files")
    def files(tmp_path_factory):
        d = tmp_path_factory.mktemp(name)
        return (str(write_tiny_gguf(d / f"{name}.gguf", chat_template=CHATML_TEMPLATE, **model_args)),
                str(write_mmproj(d / f"mmproj-{name}.gguf")))

    @pytest.fixture(scope="module", name="model")
    def model(files):
        with loaded_with_projector(name, *files, ctx_size=n_ctx, slots=2, cache_ram=64) as loaded:
            yield loaded

    @pytest.fixture(scope="module", name="bare")
    def bare(files):
        with bare_reference(*files, n_ctx=n_ctx) as reference:
            yield reference

    return files, model, bare


@contextmanager
def loaded_with_projector(name: str, path: str, mmproj: str, **settings):
    """The model and its projector loaded as the server loads them (one thread), its metrics
    kept on it as `.metrics`."""
    metrics = ServerMetrics()
    loaded = load(ModelEntry(name, path), Settings(model=path, mmproj=mmproj, **settings), metrics, threads=1)
    loaded.metrics = metrics
    try:
        yield loaded
    finally:
        loaded.close()
        loaded.free_engine()


@contextmanager
def bare_reference(path: str, mmproj: str, n_ctx: int):
    bare = BareVision(path, mmproj, n_ctx=n_ctx, marker=MEDIA_MARKER)
    try:
        yield bare
    finally:
        bare.close()


def ask(image: bytes, text: str = "what is this?") -> list[Message]:
    return [Message("user", (Text(text), Image(media_type="image/png", data=image)))]


def greedy() -> SamplingParams:
    return SamplingParams(temperature=0, logit_bias={int(k): v for k, v in NO_EOG.items()})


def run(model, messages: list[Message]):
    """(the request built, the finished output) of N_TOKENS greedy tokens with logprobs."""
    request = build_chat_request(model.chat, ChatInput(messages), greedy(), max_tokens=N_TOKENS, stop=[],
                                 logprobs=True, top_logprobs=1)
    gen = model.runtime.submit(request)
    while True:
        event = gen.events.get(timeout=60)
        if isinstance(event, Finished):
            assert event.error is None, event.error
            return request, event.output


def bare_tokens(model, bare, messages: list[Message]) -> tuple[list[int], np.ndarray]:
    """libmtmd's greedy tokens for the same rendered prompt, and its logits for the first one."""
    text = render_chat(model.chat.template, ChatInput(messages))
    images = [p.data for m in messages for p in m.parts if isinstance(p, Image)]
    banned = {token_ids()[t] for t in EOG_TEXTS}
    tokens = bare.greedy(text, images, N_TOKENS, banned)
    bare.prefill(text, images)
    return tokens, bare.logits()


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max()
    return shifted - math.log(np.exp(shifted).sum())


def assert_same_as_bare(model, bare, messages, output, tolerance: float = 1e-3) -> None:
    """Token for token, and the first token's logprob (a position off shows there first)."""
    tokens, logits = bare_tokens(model, bare, messages)
    assert output.content == model.chat.engine.detokenize(tokens)
    assert output.logprobs[0]["logprob"] == pytest.approx(log_softmax(logits)[tokens[0]], abs=tolerance)


def images_encoded(model) -> float:
    return sum(v for _, v in model.metrics.images_encoded.samples_by_key())
