"""The models in one Hub repo's files, named as llama-server and Ollama name them: `org/repo:QUANT`
(also `hf.co/org/repo:QUANT`, Ollama's spelling), the repo's default quant (Q4_K_M, else Q8_0,
else the first) also as the bare `org/repo`. A split model is one model, loaded from its first
part; a projector beside a model is paired with it (gguf_files.best_projector). The Hugging
Face cache, LM Studio's folder and llama.cpp's cache all hold repos this way. A model file
named with a control character is skipped (it would be in the model's name), and every name
from disk a log line shows is escaped (hf_layout.shown_path).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ..catalogue import ModelEntry
from ..gguf_files import basename, best_projector, default_model, first_parts, parts_of, split_info, whole
from ..hf_layout import shown_path

log = logging.getLogger("localserve.models")

HUB_PREFIXES = ("hf.co/", "huggingface.co/")     # Ollama's names for Hub models


def hub_aliases(name: str) -> tuple[str, ...]:
    return tuple(prefix + name for prefix in HUB_PREFIXES)


def repo_entries(repo_id: str, base: Path, files: list[str], source: str, origin: str,
                 extra_aliases=lambda path: ()) -> list[ModelEntry]:
    """`files`: the repo's paths under `base` (`/`-separated). Models whose parts cannot all be
    read are skipped with a log line each."""
    entries: list[ModelEntry] = []
    default = default_model(files)
    taken: set[str] = set()
    for first in first_parts(files):
        if not first.isprintable():     # it would name the model: no control character in a log line or a listing
            log.warning("discovery: %s %s: %s: a file name with a control character is no model's name; skipped",
                        source, shown_path(repo_id), shown_path(first))
            continue
        parts = parts_of(files, first)
        if not whole(parts):
            log.warning("discovery: %s %s: %s is part 1 of %d but the folder holds %s; skipped", source,
                        shown_path(repo_id), shown_path(first), split_info(first).count, shown_path(", ".join(parts)))
            continue
        unreadable = [p for p in parts if not readable(base / p)]
        if unreadable:
            log.warning("discovery: %s %s: %s is missing or unreadable; skipped", source, shown_path(repo_id),
                        shown_path(base / unreadable[0]))
            continue
        tag = split_info(first).tag or split_info(basename(first)).prefix
        name = f"{repo_id}:{tag}"
        if name in taken:       # the same quant twice (in two folders): the later one by its file name
            name = f"{repo_id}:{split_info(basename(first)).prefix}"
        taken.add(name)
        aliases = hub_aliases(name) + tuple(extra_aliases(first))
        if first == default:
            aliases += (repo_id,) + hub_aliases(repo_id)
        projector = best_projector(files, first)
        mmproj = str(base / projector) if projector and readable(base / projector) else None
        entries.append(ModelEntry(name, str(base / first), aliases, (("mmproj", mmproj),), source, origin))
    return entries


def readable(path: Path) -> bool:
    """A file (through its link) this process may read."""
    try:
        return path.is_file() and os.access(path, os.R_OK)
    except OSError:
        return False
