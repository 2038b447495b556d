"""A projector with an audio encoder gives its model the `audio` capability: said at start-up,
by --check, in /v1/models' meta, /props' modalities and Ollama's /api/show capabilities; a
projector with both encoders serves both, one with audio alone no vision."""

from __future__ import annotations

import subprocess
import sys

import pytest

from clients import ollama_client, openai_sdk
from conftest import ROOT, ServerProcess
from responses_support import get_json
from tinyaudio import write_tiny_audio_mmproj, write_tiny_av_mmproj


@pytest.fixture(scope="module")
def projectors(tmp_path_factory):
    d = tmp_path_factory.mktemp("audio-projectors")
    return {"audio": write_tiny_audio_mmproj(d / "mmproj-audio.gguf"), "both": write_tiny_av_mmproj(d / "mmproj-av.gguf")}


@pytest.mark.parametrize("kind, vision", [("audio", False), ("both", True)])
def test_an_audio_encoder_is_the_audio_capability_everywhere(tiny_model, projectors, kind, vision):
    mmproj = projectors[kind]
    srv = ServerProcess(tiny_model, "--model-id", "tiny", "--mmproj", str(mmproj))
    try:
        said = "vision and audio projector" if vision else "audio projector"
        assert f"{said} {mmproj}" in srv.log
        meta = {m.id: m for m in openai_sdk(srv, strict=False).models.list().data}["tiny"].meta
        assert (meta["audio"], meta["vision"]) == (True, vision)
        assert get_json(srv.port, "/props").json()["modalities"] == {"vision": vision, "audio": True, "video": False}
        capabilities = ollama_client(srv).show("tiny").capabilities
        assert "audio" in capabilities and ("vision" in capabilities) == vision
    finally:
        srv.stop()


def test_check_names_the_projectors_encoders(tiny_model, projectors):
    result = subprocess.run([sys.executable, "-m", "localserve", "--model", str(tiny_model), "--mmproj",
                             str(projectors["both"]), "--check"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert f"vision and audio projector {projectors['both']}" in result.stdout
