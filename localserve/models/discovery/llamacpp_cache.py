"""llama.cpp's download cache: `$LLAMA_CACHE`, else `$XDG_CACHE_HOME/llama.cpp`, else
`~/.cache/llama.cpp`.

llama.cpp since its `hf-cache` rewrite keeps the Hugging Face layout there when LLAMA_CACHE is
set (read as hf_cache.py reads the cache). Before it, `-hf org/repo:tag` wrote flat files:
`org_repo_<file>.gguf` and `manifest=org=repo=tag.json`, the Hub's manifest naming the model
(`ggufFile.rfilename`) and its projector (`mmprojFile.rfilename`); such a model is `org/repo:tag`,
as `llama-server --cache-list` named it. A flat GGUF no manifest names is served by its stem.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import orjson

from ..catalogue import ModelEntry
from ..gguf_files import basename, is_model, split_info
from ..hf_layout import shown_path
from .hf_cache import scan_root
from .repo_models import hub_aliases, readable

log = logging.getLogger("localserve.models")

SOURCE = "llamacpp-cache"
MANIFEST_PREFIX = "manifest="
MAX_MANIFEST_BYTES = 1 << 20     # a Hub manifest is a few kB; a larger file is not one


def root(environ: dict[str, str]) -> Path:
    if environ.get("LLAMA_CACHE"):
        return Path(os.path.expanduser(environ["LLAMA_CACHE"]))
    if environ.get("XDG_CACHE_HOME"):
        return Path(environ["XDG_CACHE_HOME"]) / "llama.cpp"
    return Path(environ.get("HOME") or os.path.expanduser("~")) / ".cache" / "llama.cpp"


def discover(environ: dict[str, str]) -> list[ModelEntry]:
    base = root(environ)
    if not base.is_dir():
        return []
    entries = scan_root(base, SOURCE)
    entries += flat_models(base)
    return entries


def flat_models(base: Path) -> list[ModelEntry]:
    entries: list[ModelEntry] = []
    named: set[str] = set()
    for manifest in sorted(base.glob(MANIFEST_PREFIX + "*.json")):
        entry = manifest_entry(base, manifest)
        if entry is not None:
            entries.append(entry)
            named.add(os.path.basename(entry.path))
            named.update(os.path.basename(p) for _, p in entry.overrides if isinstance(p, str))
    for path in sorted(base.glob("*.gguf")):
        info = split_info(path.name)
        if path.name in named or not is_model(path.name) or info is None or info.index != 1:
            continue
        if readable(path):
            entries.append(ModelEntry(path.stem if info.count == 1 else basename(info.prefix), str(path),
                                      source=SOURCE, origin=str(base)))
    return entries


def manifest_entry(base: Path, manifest: Path) -> ModelEntry | None:
    parts = manifest.name[len(MANIFEST_PREFIX):-len(".json")].split("=")
    if len(parts) != 3 or not all(parts):
        return None
    org, repo, tag = parts
    try:
        found = manifest.stat()
        if not stat.S_ISREG(found.st_mode):      # a FIFO would block the read: the server would not start
            raise ValueError("not a regular file")
        with open(manifest, "rb") as f:        # to the limit: a stat's size is no bound (a /proc file says 0)
            data = f.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise ValueError("too large for a manifest")
        body = orjson.loads(data)
        model_file = body["ggufFile"]["rfilename"]
        projector_file = (body.get("mmprojFile") or {}).get("rfilename")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning("discovery: %s %s: not a manifest llama.cpp wrote (%s); skipped", SOURCE, shown_path(manifest),
                    exc)
        return None
    path = local_file(base, org, repo, model_file)
    if path is None:
        log.warning("discovery: %s %s: its model file %s is missing or unreadable; skipped", SOURCE,
                    shown_path(manifest), shown_path(model_file))
        return None
    projector = local_file(base, org, repo, projector_file) if isinstance(projector_file, str) else None
    name = f"{org}/{repo}:{tag}"
    return ModelEntry(name, str(path), hub_aliases(name), (("mmproj", str(projector) if projector else None),),
                      SOURCE, str(base))


def local_file(base: Path, org: str, repo: str, rfilename: object) -> Path | None:
    """Where llama.cpp put a repo file: `org_repo_<file>` (the file's `/` as `_`)."""
    if not isinstance(rfilename, str) or not rfilename:
        return None
    for name in (f"{org}_{repo}_{rfilename.replace('/', '_')}", f"{org}_{repo}_{basename(rfilename)}"):
        if "/" not in name and name not in (".", "..") and readable(base / name):
            return base / name
    return None
