"""The Hugging Face cache's layout (huggingface_hub's, and llama.cpp's since it shares it).

    <root>/models--<org>--<repo>/refs/main              the commit `main` was at
                                /snapshots/<commit>/<path> a link to ../../blobs/<oid>
                                /blobs/<oid>                the file's bytes (oid: its LFS SHA-256)
                                /blobs/<oid>.incomplete     a download under way or cut (resumed)

The root: $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
~/.cache/huggingface/hub. Discovery reads it; a pull writes it the same way, so every tool that
reads the cache sees what this server fetched, and the reverse.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO_PREFIX = "models--"
# huggingface_hub's repo id rule (validators.py): one slash; letters, digits, `-_.`; no `--` or `..`
REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,95}/[A-Za-z0-9][A-Za-z0-9_.-]{0,95}\Z")
COMMIT = re.compile(r"^[0-9a-f]{40}\Z")
SHA256 = re.compile(r"^[0-9a-f]{64}\Z")
INCOMPLETE = ".incomplete"
MAX_WALK_FILES = 10_000       # entries one repo's folder may hold (the largest repos hold a few hundred)
MAX_WALK_DEPTH = 8            # folders down inside it (repos keep quants one or two down)
MAX_SHOWN_PATH = 300          # characters of a name read from disk that a log line shows


def cache_root(environ: dict[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    for name, below in (("HF_HUB_CACHE", ""), ("HUGGINGFACE_HUB_CACHE", ""), ("HF_HOME", "hub"),
                        ("XDG_CACHE_HOME", "huggingface/hub")):
        if env.get(name):
            return Path(os.path.expanduser(env[name])) / below
    return Path(env.get("HOME") or os.path.expanduser("~")) / ".cache" / "huggingface" / "hub"


def shown_path(path: object) -> str:
    """A name read from disk (a folder, a file, a message naming one) as a log line shows it:
    every control character escaped (a folder named with a newline or a terminal escape forges
    no log line and colours no terminal), at most MAX_SHOWN_PATH characters."""
    return ascii(str(path))[:MAX_SHOWN_PATH]


def valid_repo_id(repo_id: str) -> bool:
    return bool(REPO_ID.match(repo_id)) and "--" not in repo_id and ".." not in repo_id \
        and not repo_id.endswith(".")


def repo_folder(repo_id: str) -> str:
    return REPO_PREFIX + repo_id.replace("/", "--")


def repo_of_folder(folder: str) -> str | None:
    """`models--org--repo` → `org/repo`; None for a folder that is not a model repo's."""
    if not folder.startswith(REPO_PREFIX):
        return None
    parts = folder[len(REPO_PREFIX):].split("--")
    if len(parts) != 2:
        return None
    repo_id = "/".join(parts)
    return repo_id if valid_repo_id(repo_id) else None


def valid_file_path(path: str) -> bool:
    """A repo file's path that stays inside the snapshot: relative, no `..`, `.` or empty part,
    no backslash or control character (a listing from a mirror is not to be trusted)."""
    if not path or len(path) > 1000 or path.startswith("/") or "\\" in path:
        return False
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


class RepoCache:
    """One repo's place in the cache."""

    def __init__(self, root: Path, repo_id: str):
        self.root = root
        self.repo_id = repo_id
        self.path = root / repo_folder(repo_id)

    def blob(self, oid: str) -> Path:
        return self.path / "blobs" / oid

    def incomplete(self, oid: str) -> Path:
        return self.path / "blobs" / (oid + INCOMPLETE)

    def snapshot(self, commit: str) -> Path:
        return self.path / "snapshots" / commit

    def ref(self, name: str = "main") -> Path:
        return self.path / "refs" / name

    def read_ref(self, name: str = "main") -> str | None:
        try:
            commit = self.ref(name).read_text(encoding="ascii").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return commit if COMMIT.match(commit) else None

    def newest_snapshot(self) -> str | None:
        """The commit `main` names, else the snapshot changed last (a cache copied without refs)."""
        commit = self.read_ref()
        if commit is not None and self.snapshot(commit).is_dir():
            return commit
        try:
            snapshots = [p for p in (self.path / "snapshots").iterdir() if p.is_dir() and COMMIT.match(p.name)]
        except OSError:
            return None
        return max(snapshots, key=lambda p: p.stat().st_mtime).name if snapshots else None


class WalkRefused(OSError):
    """A folder discovery will not read: it leads out of its store, or holds more than a repo does."""


def within(root: Path, folder: Path) -> bool:
    """Whether `folder`, its links followed, lies inside `root` (itself a link or not)."""
    real_root, real = os.path.realpath(root), os.path.realpath(folder)
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def snapshot_files(snapshot: Path, root: Path) -> list[str]:
    """The repo paths (`/`-separated) of the files under a snapshot (or a folder laid out as one),
    links to files included. The folder must lie inside its store's `root`: a snapshot folder
    that is a link elsewhere (to /, to a huge tree) is none the store made. Links to folders
    inside it are not followed (no loops), and the walk stops past MAX_WALK_FILES entries or
    MAX_WALK_DEPTH folders down: WalkRefused, the repo skipped."""
    if not within(root, snapshot):
        raise WalkRefused(f"{snapshot} leads outside {root} (a linked folder); not followed")
    found, seen = [], 0
    for directory, subdirs, files in os.walk(snapshot):
        seen += len(subdirs) + len(files)
        depth = len(Path(directory).relative_to(snapshot).parts)
        if seen > MAX_WALK_FILES or (subdirs and depth >= MAX_WALK_DEPTH):
            raise WalkRefused(f"{snapshot} holds more than a model repo does (over {MAX_WALK_FILES} entries or "
                              f"{MAX_WALK_DEPTH} folders deep); not read")
        subdirs.sort()
        for name in sorted(files):
            found.append(os.path.relpath(os.path.join(directory, name), snapshot).replace(os.sep, "/"))
    return found
