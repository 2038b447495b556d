"""A pull, step by step: the name read (names.py), the repo listed (listing.py), the files
chosen (plan.py) — prepare() does these before anything is written, so a bad name, a missing
repo or quant is an error before any stream starts — then run() downloads each file (shared
with other pulls of it: downloads.py), links it into the snapshot, records the commit as
`refs/main`, and yields progress as it goes. With HF_HUB_OFFLINE=1 nothing is fetched: a model
already in the cache is found there, anything else is an error.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator
from urllib.parse import urlsplit

from ..catalogue import ModelEntry
from ..discovery.repo_models import repo_entries
from ..gguf_files import split_info
from ..hf_layout import RepoCache, cache_root, snapshot_files
from .client import HubClient, HubConfig
from .downloads import SHARED, Downloads
from .errors import HubError
from .fetch import check_space, fetch_file, inside
from .listing import Listing, RemoteFile, list_repo
from .names import HubName, parse_hub_name
from .plan import Plan, plan_pull

PROGRESS_INTERVAL = 0.25      # seconds between two progress events of a file
SOURCE = "hf-cache"           # where a pulled model lives, as discovery names that store


@dataclass(frozen=True)
class Progress:
    """One step a client hears of: Ollama's `status` (with `digest`, `total`, `completed` while a
    file downloads); `url` names the file for llama-server's progress events."""
    status: str
    digest: str | None = None
    total: int | None = None
    completed: int | None = None
    url: str | None = None


@dataclass
class Prepared:
    name: HubName
    repo: RepoCache
    commit: str
    plan: Plan | None           # None: found in the cache (offline)
    client: HubClient | None
    model_path: Path | None = None

    @property
    def model_name(self) -> str:
        """The name the model will be served by (`org/repo:QUANT`)."""
        if self.plan is not None:
            return f"{self.name.repo_id}:{self.plan.tag}"
        info = split_info(self.model_path.name)
        return f"{self.name.repo_id}:{info.tag or info.prefix}"

    def entries(self) -> list[ModelEntry]:
        """The pulled model as the catalogue names it (hf-cache's names, repo_models.py)."""
        snapshot = self.repo.snapshot(self.commit)
        files = snapshot_files(snapshot, self.repo.root)
        model = str(self.model_path.relative_to(snapshot)).replace(os.sep, "/") if self.model_path else None
        found = repo_entries(self.name.repo_id, snapshot, files, SOURCE, str(self.repo.root))
        return [e for e in found if model is None or e.path == str(snapshot / model)]


def prepare(name: object, config: HubConfig | None = None) -> Prepared:
    config = config or HubConfig.from_env()
    hub_name = parse_hub_name(name, urlsplit(config.endpoint).hostname)
    repo = RepoCache(cache_root(), hub_name.repo_id)
    if config.offline:
        return from_cache(hub_name, repo)
    client = HubClient(config)
    listing = list_repo(client, hub_name.repo_id)
    return Prepared(hub_name, repo, listing.commit, plan_pull(listing, hub_name), client)


def from_cache(name: HubName, repo: RepoCache) -> Prepared:
    commit = repo.newest_snapshot()
    if commit is not None:
        files = snapshot_files(repo.snapshot(commit), repo.root)
        cached = Listing(name.repo_id, commit, {p: RemoteFile(p, 0, None, None) for p in files})
        try:
            plan = plan_pull(cached, name)
            return Prepared(name, repo, commit, None, None, repo.snapshot(commit) / plan.model)
        except HubError:
            pass
    raise HubError(503, f"HF_HUB_OFFLINE is set and {name} is not in the Hugging Face cache ({repo.root})",
                   "offline")


def run(prepared: Prepared, downloads: Downloads = SHARED) -> Iterator[Progress]:
    """Progress as the files come; the last event is `success`. Closing the iterator (a client
    gone) lets go of the download under way (it stops once no pull wants it; the partial stays)."""
    yield Progress("pulling manifest")
    if prepared.plan is None:
        yield Progress("success")
        return
    plan, repo, client = prepared.plan, prepared.repo, prepared.client
    check_space(repo, plan.files)
    for remote in plan.files:
        yield from fetch_shared(prepared, remote, downloads)
    yield Progress("verifying sha256 digest")
    snapshot = inside(repo.path, repo.snapshot(prepared.commit))
    for remote in plan.files:
        link(repo, snapshot, remote)
    yield Progress("writing manifest")
    write_ref(repo, prepared.commit)
    prepared.model_path = snapshot / plan.model
    yield Progress("success")


def fetch_shared(prepared: Prepared, remote: RemoteFile, downloads: Downloads) -> Iterator[Progress]:
    repo, client = prepared.repo, prepared.client
    key = str(repo.blob(remote.blob_name))
    work = lambda progress, cancelled: fetch_file(client, repo, prepared.commit, remote, progress, cancelled)  # noqa: E731
    download = downloads.join(key, remote.size, work)
    digest = f"sha256:{remote.sha256}" if remote.sha256 else f"git:{remote.git_oid}"
    status = f"pulling {remote.blob_name[:12]}"
    url = client.file_url(repo.repo_id, prepared.commit, remote.path)
    try:
        while not download.done.wait(PROGRESS_INTERVAL):
            yield Progress(status, digest, remote.size, download.completed, url)
        download.result()
        yield Progress(status, digest, remote.size, remote.size, url)
    finally:
        downloads.leave(download)


def link(repo: RepoCache, snapshot: Path, remote: RemoteFile) -> None:
    """snapshots/<commit>/<path> → ../../blobs/<oid>, made under a temporary name and renamed."""
    target = snapshot / remote.path
    parent = inside(snapshot, target.parent)
    relative = os.path.relpath(repo.blob(remote.blob_name), parent)
    if target.is_symlink() and os.readlink(target) == relative:
        return
    temporary = parent / private_name(target.name)
    os.symlink(relative, temporary)
    os.replace(temporary, target)


def private_name(stem: str) -> str:
    """A temporary file's name no other writer uses: pulls of one repo run on several threads of
    one process (and in several processes), each finishing with the same ref and links."""
    return f".{stem}.{os.getpid()}.{threading.get_ident()}.tmp"


def write_ref(repo: RepoCache, commit: str) -> None:
    refs = inside(repo.path, repo.ref().parent)
    temporary = refs / private_name("main")
    temporary.write_text(commit)
    os.replace(temporary, repo.ref())


def pull_now(name: str, report: Callable[[str], None]) -> list[ModelEntry]:
    """A whole pull on this thread (--hf at start): its entries; report() hears a line per step
    and per quarter of each file."""
    prepared = prepare(name)
    said = set()
    for event in run(prepared):
        quarter = 4 * (event.completed or 0) // event.total if event.total else -1
        if (event.status, quarter) not in said:
            said.add((event.status, quarter))
            report(event.status + (f" {25 * quarter}%" if event.total else ""))
    return prepared.entries()
