"""An audio projector libmtmd would abort on at its first clip is refused at load: an Ultravox
encoder whose stack factor makes libmtmd count a window's positions one short of what its graph
makes (clip.cpp: "Invalid number of output tokens", which ends the process)."""

from __future__ import annotations

import pytest

from localserve.engine.audio import stacking_refusal
from localserve.engine.model_load import ModelLoadError
from localserve.engine import vision
from localserve.engine.vision import Projector
from tinyaudio import write_tiny_audio_mmproj


@pytest.mark.parametrize("factor, refused", [(1, False), (2, False), (4, False), (5, False), (7, True), (8, True),
                                             (16, False), (24, True), (30, False)])
def test_a_stack_factor_is_refused_where_libmtmd_counts_other_than_its_graph_makes(factor, refused):
    meta = {"clip.projector_type": "ultravox", "clip.audio.projector.stack_factor": factor}
    assert (stacking_refusal(meta) is not None) is refused
    assert (stacking_refusal({"clip.audio.projector_type": "ultravox",
                              "clip.audio.projector.stack_factor": factor}) is not None) is refused


def test_other_encoders_and_a_projector_without_the_key_pass():
    assert stacking_refusal({"clip.projector_type": "qwen2a", "clip.audio.projector.stack_factor": 8}) is None
    assert stacking_refusal({"clip.projector_type": "mlp"}) is None
    assert stacking_refusal({}) is None


def test_the_projector_is_refused_before_libmtmd_loads_it(tmp_path, monkeypatch):
    path = write_tiny_audio_mmproj(tmp_path / "mmproj-stack8.gguf", stack_factor=8)
    loads = []
    # no model here: libmtmd is never to be asked (a load that got this far fails, and the test says so)
    monkeypatch.setattr(vision.mtmd, "mtmd_init_from_file", lambda *args: loads.append(args) or None)
    with pytest.raises(ModelLoadError) as caught:
        Projector(str(path), 0, 0, n_batch=1, threads=1, use_gpu=False)
    assert loads == []
    assert "stacks 8 frames" in str(caught.value) and "187" in str(caught.value)
