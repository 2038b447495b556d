"""contrib/llama_wheel.py: one llama-cpp-python wheel per (version, CMake options), checked."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "contrib"))
import llama_wheel  # noqa: E402


def make_wheel(path: Path, libraries: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr("llama_cpp/__init__.py", "")
        for name, data in libraries.items():
            wheel.writestr(name, data)
    return path


def test_the_key_follows_the_options_not_their_order_or_spacing():
    key = llama_wheel.build_key("0.3.36", "-DGGML_RPC=ON -DGGML_OPENMP=OFF")
    assert key == llama_wheel.build_key("0.3.36", "  -DGGML_OPENMP=OFF   -DGGML_RPC=ON ")
    assert key != llama_wheel.build_key("0.3.36", "-DGGML_RPC=ON")
    assert key != llama_wheel.build_key("0.3.37", "-DGGML_RPC=ON -DGGML_OPENMP=OFF")
    assert key.startswith("0.3.36-")


@pytest.mark.parametrize("args,expected", [("-DGGML_OPENMP=OFF", False), ("-DGGML_OPENMP=ON", True),
                                           ("-DGGML_RPC=ON", None), ("-DGGML_OPENMP=ON -DGGML_OPENMP=off", False)])
def test_option_on(args, expected):
    assert llama_wheel.option_on(args, "GGML_OPENMP") is expected


def test_a_wheel_that_does_not_match_its_options_is_refused(tmp_path):
    args = "-DGGML_RPC=ON -DGGML_OPENMP=OFF"
    good = make_wheel(tmp_path / "good.whl", {"llama_cpp/lib/libggml-cpu.so": b"\x7fELF libc.so.6",
                                              "llama_cpp/lib/libggml-rpc.so": b"\x7fELF"})
    assert llama_wheel.wheel_problem(good, args) is None
    openmp = make_wheel(tmp_path / "openmp.whl", {"llama_cpp/lib/libggml-cpu.so": b"\x7fELF libgomp.so.1",
                                                  "llama_cpp/lib/libggml-rpc.so": b"\x7fELF"})
    assert "libgomp" in llama_wheel.wheel_problem(openmp, args)
    assert llama_wheel.wheel_problem(openmp, "-DGGML_RPC=ON") is None       # OpenMP not refused unless asked
    no_rpc = make_wheel(tmp_path / "norpc.whl", {"llama_cpp/lib/libggml-cpu.so": b"\x7fELF"})
    assert "RPC" in llama_wheel.wheel_problem(no_rpc, args)


@pytest.mark.parametrize("marker", [b"posix_spawnp", b"execvp", b"ffprobe -v quiet", b"ffmpeg"])
def test_a_libmtmd_that_can_start_a_program_is_refused_when_video_is_off(tmp_path, marker):
    args = "-DGGML_RPC=ON -DMTMD_VIDEO=OFF"
    rpc = {"llama_cpp/lib/libggml-rpc.so": b"\x7fELF"}
    quiet = make_wheel(tmp_path / "quiet.whl", {**rpc, "llama_cpp/lib/libmtmd.so": b"\x7fELF stbi_load"})
    assert llama_wheel.wheel_problem(quiet, args) is None
    video = make_wheel(tmp_path / "video.whl", {**rpc, "llama_cpp/lib/libmtmd.so": b"\x7fELF " + marker})
    assert "libmtmd.so can start programs" in llama_wheel.wheel_problem(video, args)
    assert llama_wheel.wheel_problem(video, "-DGGML_RPC=ON") is None       # not refused unless video is off
    other = make_wheel(tmp_path / "other.whl", {**rpc, "llama_cpp/lib/libggml-base.so": b"\x7fELF " + marker})
    assert llama_wheel.wheel_problem(other, args) is None                  # only libmtmd's video path is checked


def test_a_kept_wheel_is_reused_only_when_it_matches(tmp_path):
    args = "-DGGML_OPENMP=OFF"
    folder = tmp_path / "key"
    folder.mkdir()
    assert llama_wheel.cached_wheel(folder, args) is None
    wheel = make_wheel(folder / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl",
                       {"llama_cpp/lib/libggml-cpu.so": b"libgomp.so.1"})
    assert llama_wheel.cached_wheel(folder, args) is None
    make_wheel(wheel, {"llama_cpp/lib/libggml-cpu.so": b"\x7fELF"})
    assert llama_wheel.cached_wheel(folder, args) == wheel


def test_a_venv_is_reinstalled_only_when_its_stamp_differs(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(llama_wheel.subprocess, "run", lambda cmd, check: calls.append(cmd))
    venv = tmp_path / "venv"
    venv.mkdir()
    wheel = tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl"
    llama_wheel.install_into_venv(venv, wheel, "0.3.36-aaaa")
    assert any("--force-reinstall" in cmd for cmd in calls)
    assert (venv / llama_wheel.STAMP_NAME).read_text().strip() == "0.3.36-aaaa"
    calls.clear()
    llama_wheel.install_into_venv(venv, wheel, "0.3.36-aaaa")
    assert calls == []
    llama_wheel.install_into_venv(venv, wheel, "0.3.36-bbbb")
    assert calls
