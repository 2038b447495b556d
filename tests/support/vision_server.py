"""Module fixtures for end-to-end tests of images: the tiny projector, a server on the tiny
model with it (--mmproj), and the bare libmtmd reference for the same pair. A test module
imports the three names; each module gets its own projector, server and reference."""

from __future__ import annotations

import pytest

from bench.bare_vision import BareVision
from conftest import ServerProcess
from tinyvision import write_tiny_mmproj


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory):
    return write_tiny_mmproj(tmp_path_factory.mktemp("mmproj") / "mmproj-tiny.gguf")


@pytest.fixture(scope="module")
def vision_server(tiny_model, mmproj, tmp_path_factory):
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--slots", "2", "--mmproj", str(mmproj),
                        env={"XDG_DATA_HOME": str(tmp_path_factory.mktemp("data"))})
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def bare(tiny_model, mmproj):
    b = BareVision(str(tiny_model), str(mmproj), n_ctx=1024)
    yield b
    b.close()
