"""The real chat templates (llama.cpp's models/templates/, from the pinned llama-cpp-python sdist).

`make template-corpus` (a step of `make test`) unpacks them into .cache/chat-templates; they are
never committed. LOCALSERVE_TEMPLATE_CORPUS names another folder. A test that needs the corpus
fails, with the reason, when it is missing: the suite must not pass by running nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_DIR = ROOT / ".cache" / "chat-templates"


def corpus_dir() -> Path:
    folder = Path(os.environ.get("LOCALSERVE_TEMPLATE_CORPUS") or DEFAULT_DIR)
    if not any(folder.glob("*.jinja")):
        pytest.fail(f"no chat templates in {folder}: run `make template-corpus` "
                    "(it unpacks them from the pinned llama-cpp-python sdist)")
    return folder


def corpus_templates() -> dict[str, str]:
    """Each template's file stem → its Jinja source, sorted by name."""
    return {path.stem: path.read_text(encoding="utf-8") for path in sorted(corpus_dir().glob("*.jinja"))}


def corpus_names() -> list[str]:
    """The template names, for parametrising at collection time (empty when the corpus is missing,
    so collection still works and the corpus test fails with the reason)."""
    folder = Path(os.environ.get("LOCALSERVE_TEMPLATE_CORPUS") or DEFAULT_DIR)
    return sorted(path.stem for path in folder.glob("*.jinja"))
