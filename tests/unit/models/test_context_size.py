"""A request's num_ctx, checked before it waits for its model (models/context_size.py): nothing
asked below the configured context, the training context at most, a 400 past --max-memory."""

from __future__ import annotations

import pytest

from localserve.dialects.failures import model_error
from localserve.models.catalogue import ModelEntry
from localserve.models.context_size import wanted_context
from localserve.models.errors import BadModelRequest
from localserve.models.footprint import estimate_bytes
from localserve.settings import Settings
from tinymodel import write_tiny_gguf


@pytest.fixture(scope="module")
def entry(tmp_path_factory) -> ModelEntry:
    path = write_tiny_gguf(tmp_path_factory.mktemp("ctx") / "m.gguf", context_length=4096, n_embd=128, n_layer=4)
    return ModelEntry("m", str(path))


def test_what_a_request_asks(entry):
    settings = Settings(ctx_size=256)
    assert wanted_context(entry, settings, None) is None
    assert wanted_context(entry, settings, 256) is None           # no more than it has: nothing changes
    assert wanted_context(entry, settings, 1000) == 1000
    assert wanted_context(entry, settings, 100_000) == 4096       # the training context at most, as Ollama
    assert wanted_context(entry, Settings(), 4096) is None         # served with its training context already


def test_past_max_memory_is_a_400_naming_the_limit(entry):
    small = estimate_bytes(entry.path, Settings(ctx_size=256))
    large = estimate_bytes(entry.path, Settings(ctx_size=4096))
    limit = (small + large) // 2
    settings = Settings(ctx_size=256, max_memory=limit)
    assert wanted_context(entry, settings, 512) == 512
    with pytest.raises(BadModelRequest) as caught:
        wanted_context(entry, settings, 4096)
    error = model_error(caught.value)       # the answer every dialect gives it
    assert error.status == 400 and error.param == "num_ctx" and "--max-memory" in error.message
    assert f"({limit // (1024 * 1024)} MiB)" in error.message
