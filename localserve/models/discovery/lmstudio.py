"""LM Studio's models folder: `~/.lmstudio/models/<publisher>/<repo>/*.gguf` (before LM Studio
0.3: `~/.cache/lm-studio/models/`), the Hub's repos as LM Studio downloads them. Named as the
Hub names them (`publisher/repo:QUANT`), and as LM Studio's own API listed them, by their path
(`publisher/repo/file.gguf`). A folder that leads outside the models folder (a link) is not
followed; files linked from elsewhere are read (LM Studio's import can link them). Every name
from disk a log line shows is escaped (hf_layout.shown_path), as the Ollama walk's are; a model
whose name would hold a control character is skipped where every store's are (sources.py)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..catalogue import ModelEntry
from ..hf_layout import shown_path, snapshot_files, within
from .repo_models import repo_entries

log = logging.getLogger("localserve.models")

SOURCE = "lmstudio"


def roots(environ: dict[str, str]) -> list[Path]:
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


def discover(environ: dict[str, str]) -> list[ModelEntry]:
    entries: list[ModelEntry] = []
    for root in roots(environ):
        if root.is_dir():
            entries += scan(root)
    return entries


def scan(root: Path) -> list[ModelEntry]:
    entries: list[ModelEntry] = []
    for publisher in sorted(p for p in root.iterdir() if p.is_dir()):
        if not within(root, publisher):
            log.warning("discovery: %s %s leads outside %s (a linked folder); skipped", SOURCE, shown_path(publisher),
                        shown_path(root))
            continue
        try:
            repos = sorted(p for p in publisher.iterdir() if p.is_dir())
        except OSError as exc:
            log.warning("discovery: %s %s: cannot read it: %s; skipped", SOURCE, shown_path(publisher),
                        shown_path(exc.strerror or exc))
            continue
        for repo in repos:
            repo_id = f"{publisher.name}/{repo.name}"
            try:
                files = snapshot_files(repo, root)
            except OSError as exc:      # WalkRefused too: its message names the folder
                log.warning("discovery: %s %s: cannot read it: %s; skipped", SOURCE, shown_path(repo),
                            shown_path(exc.strerror or exc))
                continue
            entries += repo_entries(repo_id, repo, files, SOURCE, str(root),
                                    extra_aliases=lambda path, r=repo_id: (f"{r}/{path}",))
    return entries

