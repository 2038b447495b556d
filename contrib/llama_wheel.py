"""The llama-cpp-python wheel for this machine, built once per (version, CMAKE_ARGS) and kept.

    python contrib/llama_wheel.py [--venv DIR] [--print-wheel]

pip's wheel cache keys a built wheel by its source alone, so a wheel built with other CMake
options (OpenMP on, RPC off) would be installed silently. Here the options are the key: each
(version, CMAKE_ARGS) gets its own folder under the wheel cache, its wheel is checked against the
options (RPC backend present, libgomp absent when OpenMP is off, and a libmtmd that cannot start a
program: with MTMD_VIDEO on it runs ffprobe/ffmpeg on bytes stb cannot read), and a venv records which key
it holds, so `make install` rebuilds and reinstalls exactly when the options change.

The version is the one setup.cfg pins. The cache is $LOCALSERVE_WHEEL_CACHE, else
$XDG_CACHE_HOME/localserve/llama-wheels (~/.cache/...): outside the clone, so a clean checkout
on the same machine does not compile llama.cpp again.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CMAKE_ARGS = "-DGGML_RPC=ON -DGGML_OPENMP=OFF -DMTMD_VIDEO=OFF"
STAMP_NAME = ".llama-cpp-build"


def pinned_version(setup_cfg: Path = ROOT / "setup.cfg") -> str:
    found = re.search(r"llama-cpp-python==([\w.]+)", setup_cfg.read_text())
    if not found:
        raise SystemExit("llama_wheel: setup.cfg pins no llama-cpp-python version")
    return found.group(1)


def cmake_args() -> str:
    return os.environ.get("CMAKE_ARGS") or DEFAULT_CMAKE_ARGS


def build_key(version: str, args: str) -> str:
    """The wheel's identity: the version and the options, in any order or spacing."""
    options = " ".join(sorted(args.split()))
    return f"{version}-{hashlib.sha256(options.encode()).hexdigest()[:12]}"


def cache_root() -> Path:
    if os.environ.get("LOCALSERVE_WHEEL_CACHE"):
        return Path(os.environ["LOCALSERVE_WHEEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "localserve" / "llama-wheels"


def option_on(args: str, name: str) -> bool | None:
    """-DNAME=ON → True, -DNAME=OFF → False, absent → None (llama.cpp's default)."""
    found = re.findall(rf"-D{name}=(\w+)", args)
    if not found:
        return None
    return found[-1].upper() in ("ON", "1", "TRUE", "YES")


def wheel_problem(wheel: Path, args: str) -> str | None:
    """Why this wheel does not match the options, or None when it does."""
    with zipfile.ZipFile(wheel) as archive:
        libraries = [name for name in archive.namelist() if ".so" in name or name.endswith(".dylib")]
        if option_on(args, "GGML_RPC") and not any("ggml-rpc" in name for name in libraries):
            return "it has no RPC backend although CMAKE_ARGS asks for one"
        if option_on(args, "MTMD_VIDEO") is False:
            for name in libraries:
                if "mtmd" in name and spawns_programs(archive.read(name)):
                    return f"{name} can start programs (ffmpeg) although CMAKE_ARGS turns MTMD_VIDEO off"
        if option_on(args, "GGML_OPENMP") is False:
            for name in libraries:
                if b"libgomp" in archive.read(name):
                    return f"{name} links libgomp although CMAKE_ARGS turns OpenMP off"
    return None


# What a library that starts programs imports or names: sheredom's subprocess.h calls posix_spawnp,
# and libmtmd's video path names the tools it runs.
SPAWN_MARKERS = (b"posix_spawn", b"execvp", b"ffprobe", b"ffmpeg")


def spawns_programs(library: bytes) -> bool:
    return any(marker in library for marker in SPAWN_MARKERS)


def cached_wheel(folder: Path, args: str) -> Path | None:
    wheels = sorted(folder.glob("llama_cpp_python-*.whl"))
    if len(wheels) == 1 and wheel_problem(wheels[0], args) is None:
        return wheels[0]
    return None


def build_wheel(version: str, args: str, folder: Path) -> Path:
    """Compile llama-cpp-python from its sdist with these options (never from pip's cache)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    print(f"llama_wheel: building llama-cpp-python {version} with CMAKE_ARGS='{args}' "
          "(several minutes on two cores, once per set of options)", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="llama-wheel-", dir=folder.parent))
    try:
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-cache-dir", "--no-deps",
                        "--no-binary", "llama-cpp-python", "--wheel-dir", str(tmp),
                        f"llama-cpp-python=={version}"],
                       check=True, env={**os.environ, "CMAKE_ARGS": args})
        wheels = sorted(tmp.glob("llama_cpp_python-*.whl"))
        if len(wheels) != 1:
            raise SystemExit(f"llama_wheel: expected one wheel, pip left {wheels}")
        problem = wheel_problem(wheels[0], args)
        if problem:
            raise SystemExit(f"llama_wheel: the fresh build does not match its options: {problem}")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder / wheels[0].name


def ensure_wheel(version: str, args: str) -> Path:
    folder = cache_root() / build_key(version, args)
    return cached_wheel(folder, args) or build_wheel(version, args, folder)


def install_into_venv(venv: Path, wheel: Path, key: str) -> None:
    """Install the wheel unless the venv's stamp says it holds this build already."""
    stamp = venv / STAMP_NAME
    if stamp.is_file() and stamp.read_text().strip() == key:
        return
    print(f"llama_wheel: installing {wheel.name} ({key}) into {venv}", flush=True)
    python = venv / "bin" / "python"
    # --force-reinstall for llama-cpp-python alone: a build with other options has the same version
    subprocess.run([str(python), "-m", "pip", "install", "--force-reinstall", "--no-deps", str(wheel)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", str(wheel)], check=True)     # its dependencies
    stamp.write_text(key + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, help="install the wheel into this venv (when its build differs)")
    parser.add_argument("--print-wheel", action="store_true", help="print the wheel's path")
    options = parser.parse_args(argv)
    version, args = pinned_version(), cmake_args()
    wheel = ensure_wheel(version, args)
    if options.venv:
        install_into_venv(options.venv, wheel, build_key(version, args))
    if options.print_wheel:
        print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
