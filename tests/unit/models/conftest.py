"""Fixtures of the Hub pull tests: a mirror (tests/support/hub_mirror.py, a real HTTP server)
and a Hugging Face cache in a temporary directory."""

from __future__ import annotations

import pytest
from hub_mirror import Mirror


@pytest.fixture
def mirror():
    server = Mirror()
    yield server
    server.close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    root = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root
