"""The Hugging Face cache (hf_layout.py): every `models--org--repo` folder's snapshot (the
commit `refs/main` names, else the newest), its GGUFs named `org/repo:QUANT` (repo_models.py).
A snapshot whose folder leads outside the cache, or holds more than a repo does, is skipped
(hf_layout.snapshot_files)."""

from __future__ import annotations

import logging
from pathlib import Path

from ..catalogue import ModelEntry
from ..hf_layout import RepoCache, cache_root, repo_of_folder, snapshot_files
from .repo_models import repo_entries

log = logging.getLogger("localserve.models")

SOURCE = "hf-cache"


def discover(environ: dict[str, str]) -> list[ModelEntry]:
    root = cache_root(environ)
    return scan_root(root, SOURCE) if root.is_dir() else []


def scan_root(root: Path, source: str) -> list[ModelEntry]:
    """Every repo's models under a cache root."""
    entries: list[ModelEntry] = []
    for folder in sorted(p.name for p in root.iterdir()):
        repo_id = repo_of_folder(folder)
        if repo_id is None:
            continue
        repo = RepoCache(root, repo_id)
        try:
            commit = repo.newest_snapshot()
            if commit is None:
                continue
            snapshot = repo.snapshot(commit)
            files = snapshot_files(snapshot, root)
        except OSError as exc:
            log.warning("discovery: %s %s: cannot read it: %s; skipped", source, repo_id, exc)
            continue
        entries += repo_entries(repo_id, snapshot, files, source, str(root))
    return entries
