"""A repo's files as the Hub's API lists them:

    GET /api/models/{repo}/revision/main          {"sha": commit, "gated": false | "auto" | "manual", ...}
    GET /api/models/{repo}/tree/{commit}?recursive=true
        [{"type": "file", "path", "size", "oid": git blob id, "lfs": {"oid": sha256, "size"}}, ...]
        (more pages behind a `Link: <...>; rel="next"` header)

Everything a mirror says is checked before it is used: a commit of 40 hex digits, file paths
that stay inside the snapshot (hf_layout.valid_file_path), sizes that are numbers, checksums of
the right form. A file that fails is left out with a log line (it can then not be chosen).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from ..hf_layout import COMMIT, SHA256, valid_file_path
from .client import HubClient, same_origin
from .errors import HubError

log = logging.getLogger("localserve.models")

MAX_PAGES = 100               # pages of a tree listing (the Hub sends 1,000 entries a page)
MAX_FILES = 100_000           # files a repo may list (the Hub's largest GGUF repos list a few thousand)
GIT_OID = re.compile(r"^[0-9a-f]{40}\Z")
NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None       # an LFS file's SHA-256: its blob name in the cache, and its check
    git_oid: str | None      # a file kept in git itself: its git blob id (SHA-1 of "blob N\0" + bytes)

    @property
    def blob_name(self) -> str:
        return self.sha256 or self.git_oid or ""


@dataclass(frozen=True)
class Listing:
    repo_id: str
    commit: str
    files: dict[str, RemoteFile]


def list_repo(client: HubClient, repo_id: str, revision: str = "main") -> Listing:
    what = f"repo {repo_id}"
    info, _ = client.get_json(client.api_url("models", repo_id, "revision", revision), what)
    if not isinstance(info, dict):
        raise HubError(502, f"{what}: the repo's description is not a JSON object")
    commit = info.get("sha")
    if not isinstance(commit, str) or not COMMIT.match(commit):
        raise HubError(502, f"{what}: the Hub named no commit for {revision}")
    if info.get("gated") not in (None, False) and not client.config.token:
        raise HubError(401, f"{what}: the repo is gated: accept its terms on the Hub and set HF_TOKEN", "gated_repo")
    files: dict[str, RemoteFile] = {}
    listed = 0
    url = client.api_url("models", repo_id, "tree", commit, query="recursive=true")
    for _ in range(MAX_PAGES):
        items, answer = client.get_json(url, f"{what}: its file list")
        if not isinstance(items, list):
            raise HubError(502, f"{what}: its file list is not a JSON array")
        listed += len(items)
        if listed > MAX_FILES:      # counted before each is read: a bad one is a log line
            raise HubError(502, f"{what}: its file list names more than {MAX_FILES} files; not a repo to pull from")
        for item in items:
            remote = read_item(item, repo_id)
            if remote is not None:
                files[remote.path] = remote
        following = next_page(answer.header("Link"), client.config.endpoint)
        if following is None:
            return Listing(repo_id, commit, files)
        url = following
    # a partial list could choose the wrong quant or miss a part: none at all
    raise HubError(502, f"{what}: its file list goes on past {MAX_PAGES} pages; not a repo to pull from")


def read_item(item: object, repo_id: str) -> RemoteFile | None:
    if not isinstance(item, dict) or item.get("type") != "file":
        return None
    path, size, lfs = item.get("path"), item.get("size"), item.get("lfs")
    if not isinstance(path, str) or not valid_file_path(path):
        log.warning("hub: %s lists a file at %r, outside the repo; left out", repo_id, str(path)[:200])
        return None
    if isinstance(lfs, dict):
        size, sha256 = lfs.get("size", size), lfs.get("oid")
        if not isinstance(sha256, str) or not SHA256.match(sha256):
            log.warning("hub: %s lists %s with no SHA-256 of the form the Hub gives; left out", repo_id, path)
            return None
        git_oid = None
    else:
        sha256, git_oid = None, item.get("oid")
        if not isinstance(git_oid, str) or not GIT_OID.match(git_oid):
            log.warning("hub: %s lists %s with no checksum; left out", repo_id, path)
            return None
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        log.warning("hub: %s lists %s with no size; left out", repo_id, path)
        return None
    return RemoteFile(path, size, sha256, git_oid)


def next_page(link: str | None, endpoint: str) -> str | None:
    found = NEXT_LINK.search(link or "")
    if found is None:
        return None
    if not same_origin(found.group(1), endpoint):
        raise HubError(502, "the file list's next page is on another host; not followed")
    return found.group(1)
