"""Loading a model with its vision projector: --models-dir pairs an mmproj*.gguf with the model
it is named after (and never serves it as a model); a projector libmtmd refuses (another
model's width) or a missing file stops the start with one line that names it."""

from __future__ import annotations

from clients import openai_sdk
from conftest import ServerProcess
from tinymodel import CHATML_TEMPLATE, write_tiny_gguf
from tinyvision import write_tiny_mmproj


def test_models_dir_pairs_a_projector_with_the_model_named_after_it(tmp_path):
    write_tiny_gguf(tmp_path / "tiny-Q8_0.gguf", chat_template=CHATML_TEMPLATE)
    write_tiny_gguf(tmp_path / "other.gguf", chat_template=CHATML_TEMPLATE, seed=1)
    write_tiny_mmproj(tmp_path / "mmproj-tiny-f16.gguf")
    srv = ServerProcess(None, "--models-dir", str(tmp_path), "--preload", "tiny-Q8_0")
    try:
        assert "tiny-Q8_0 (+ vision)" in srv.log and "mmproj-tiny-f16 " not in srv.log
        models = {m.id: m for m in openai_sdk(srv, strict=False).models.list().data}
        assert set(models) == {"tiny-Q8_0", "other"}
        assert models["tiny-Q8_0"].settings["mmproj"] == str(tmp_path / "mmproj-tiny-f16.gguf")
        assert models["tiny-Q8_0"].meta["vision"] is True
        assert models["other"].settings["mmproj"] is None
    finally:
        srv.stop()


def test_a_projector_of_another_width_stops_the_start_naming_it(tmp_path):
    model = write_tiny_gguf(tmp_path / "tiny.gguf", chat_template=CHATML_TEMPLATE)
    wrong = write_tiny_mmproj(tmp_path / "mmproj-wide.gguf", n_embd_text=128)
    srv = ServerProcess(model, "--mmproj", str(wrong), wait=False)
    assert srv.proc.wait(timeout=60) == 2
    srv.stop()
    assert "could not load the vision projector" in srv.log and str(wrong) in srv.log
    assert "mismatch between text model (n_embd = 64) and mmproj (n_embd = 128)" in srv.log


def test_a_missing_projector_file_stops_the_start(tmp_path):
    model = write_tiny_gguf(tmp_path / "tiny.gguf", chat_template=CHATML_TEMPLATE)
    srv = ServerProcess(model, "--mmproj", str(tmp_path / "nowhere.gguf"), wait=False)
    assert srv.proc.wait(timeout=60) == 2
    srv.stop()
    assert "nowhere.gguf" in srv.log
