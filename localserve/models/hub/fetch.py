"""One file from the Hub into the cache, as huggingface_hub lays it out (hf_layout.py):

    blobs/<oid>.incomplete   written as the bytes come, kept when a pull stops (the next resumes
                             it with Range) and removed only when its bytes prove wrong
    blobs/<oid>              the bytes once their SHA-256 (an LFS file's oid; a git file's blob id)
                             matches: renamed into place, so a file is whole or absent
    snapshots/<commit>/<path> a relative link to it, made under a temporary name and renamed

One writer per blob, across processes too: an flock on `.locks/models--org--repo/<oid>.lock`
(the lock file huggingface_hub takes). Before a byte is fetched the disk must hold what is
left plus DISK_MARGIN. The mirror is not trusted: a body longer than the listing's size, a
Content-Length or Content-Range that disagrees with it, an HTML page, stop the file.
Directories inside the repo's folder that lead elsewhere (links planted there) are refused.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Callable

from ..hf_layout import RepoCache
from .client import HubClient, html_error, is_html, shown_host
from .errors import HubError
from .listing import RemoteFile

CHUNK = 1 << 20               # bytes read and written at a time
DISK_MARGIN = 64 << 20        # bytes left free after a download (the log, the store, other writers)
LOCK_POLL = 0.2               # seconds between tries at a blob another process is writing


class Cancelled(Exception):
    """The pull's clients left: the partial file stays for the next pull to resume."""


def fetch_file(client: HubClient, repo: RepoCache, commit: str, remote: RemoteFile,
               progress: Callable[[int], None], cancelled: threading.Event) -> Path:
    """The blob's path once its bytes are whole and checked; progress(bytes so far) as they come."""
    blob = repo.blob(remote.blob_name)
    blobs = inside(repo.path, blob.parent)
    if blob.is_file() and not blob.is_symlink() and blob.stat().st_size == remote.size:
        progress(remote.size)
        return blob
    lock_dir = inside(repo.root / ".locks", repo.root / ".locks" / repo.path.name)
    with blob_lock(lock_dir / f"{remote.blob_name}.lock", cancelled):
        if blob.is_file() and not blob.is_symlink() and blob.stat().st_size == remote.size:
            progress(remote.size)       # another process finished it while this one waited
            return blob
        download(client, repo, commit, remote, blobs, progress, cancelled)
    return blob


def inside(base: Path, directory: Path) -> Path:
    """`directory`, made, once it is certain it lies within `base` (no link leads out of it)."""
    base.mkdir(parents=True, exist_ok=True)
    directory.mkdir(parents=True, exist_ok=True)
    real_base, real = os.path.realpath(base), os.path.realpath(directory)
    if real != real_base and not real.startswith(real_base + os.sep):
        raise HubError(500, f"{directory} leads outside {base} (a link planted in the cache?); refusing to write",
                       "cache_unsafe")
    return directory


class blob_lock:
    def __init__(self, path: Path, cancelled: threading.Event):
        self.path, self.cancelled, self.fd = path, cancelled, -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if self.cancelled.wait(LOCK_POLL):
                    os.close(self.fd)
                    raise Cancelled() from None

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)       # closing releases the flock


def hasher_for(remote: RemoteFile):
    if remote.sha256:
        return hashlib.sha256()
    digest = hashlib.sha1()     # git's blob id: SHA-1 of "blob <size>\0" and the bytes
    digest.update(f"blob {remote.size}\0".encode())
    return digest


def check_space(repo: RepoCache, files: list[RemoteFile]) -> None:
    """Room on the disk for every file a pull still lacks (less what their partials hold), before
    its first byte: a split model must not fail at its last part for want of room."""
    blobs = inside(repo.path, repo.path / "blobs")
    needed = 0
    for remote in files:
        if not repo.blob(remote.blob_name).is_file():
            partial = repo.incomplete(remote.blob_name)
            have = partial.stat().st_size if partial.is_file() and not partial.is_symlink() else 0
            needed += remote.size - min(have, remote.size)
    refuse_unless_room(blobs, needed, f"{len(files)} file(s)" if len(files) > 1 else files[0].path)


def refuse_unless_room(blobs: Path, needed: int, what: str) -> None:
    free = shutil.disk_usage(blobs).free
    if free < needed + DISK_MARGIN:
        raise HubError(507, f"not enough disk space for {what}: it needs {mib(needed)} MiB (and {mib(DISK_MARGIN)} "
                            f"MiB to spare), {mib(free)} MiB are free in {blobs}", "insufficient_storage")


def download(client: HubClient, repo: RepoCache, commit: str, remote: RemoteFile, blobs: Path,
             progress: Callable[[int], None], cancelled: threading.Event) -> None:
    partial = repo.incomplete(remote.blob_name)
    fd = os.open(partial, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        with os.fdopen(fd, "r+b") as out:
            have = os.fstat(fd).st_size
            if have > remote.size:          # not a prefix of this file: start again
                out.truncate(0)
                have = 0
            refuse_unless_room(blobs, remote.size - have, remote.path)
            digest = hasher_for(remote)
            out.seek(0)
            for chunk in iter(lambda: out.read(CHUNK), b""):
                digest.update(chunk)
            have, digest = receive(client, repo, commit, remote, out, have, digest, progress, cancelled)
            out.flush()
            os.fsync(out.fileno())
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise HubError(507, f"{remote.path}: the disk filled up while it downloaded ({blobs}); the part received is "
                            f"kept for the next pull to resume once there is room", "insufficient_storage") from None
    expected = remote.sha256 or remote.git_oid
    if digest.hexdigest() != expected:
        partial.unlink(missing_ok=True)      # wrong bytes are no start for a resume
        raise HubError(502, f"{remote.path}: the bytes received do not match the checksum the listing gives "
                            f"({expected[:12]}…); nothing kept", "checksum_mismatch")
    os.replace(partial, repo.blob(remote.blob_name))


def receive(client: HubClient, repo: RepoCache, commit: str, remote: RemoteFile, out, have: int, digest,
            progress: Callable[[int], None], cancelled: threading.Event):
    """The rest of the file into `out` (at `have`); the bytes it then holds, and their digest."""
    progress(have)
    if have == remote.size:
        return have, digest
    url = client.file_url(repo.repo_id, commit, remote.path)
    answer = client.open(url, headers={"Range": f"bytes={have}-"} if have else {}, what=remote.path)
    try:
        if is_html(answer.header("Content-Type")):
            raise html_error(answer.url)
        if have and answer.status == 200:       # the range was ignored: the whole file comes again
            out.truncate(0)
            have, digest = 0, hasher_for(remote)
        check_length(answer, remote, have)
        out.seek(have)
        last_report = time.monotonic()
        while have < remote.size:
            if cancelled.is_set():
                raise Cancelled()
            chunk = answer.read(min(CHUNK, remote.size - have))
            if not chunk:
                raise HubError(502, f"{remote.path}: {shown_host(answer.url)} ended the file at {have} of "
                                    f"{remote.size} bytes (kept: the next pull resumes it)")
            out.write(chunk)
            digest.update(chunk)
            have += len(chunk)
            if time.monotonic() - last_report >= 0.1 or have == remote.size:
                progress(have)
                last_report = time.monotonic()
        if answer.read(1):
            raise HubError(502, f"{remote.path}: {shown_host(answer.url)} sent more than the {remote.size} bytes the "
                                f"listing gives", "size_mismatch")
        return have, digest
    finally:
        answer.close()


def check_length(answer, remote: RemoteFile, have: int) -> None:
    if have and answer.status == 206:      # the range first: a range elsewhere has its own right length
        ranged = answer.header("Content-Range") or ""
        if not ranged.startswith(f"bytes {have}-"):
            raise HubError(502, f"{remote.path}: {shown_host(answer.url)} sent the range '{ranged[:60]}' where "
                                f"bytes {have}- were asked", "size_mismatch")
    declared = answer.header("Content-Length")
    if declared is not None and (not declared.isdigit() or int(declared) != remote.size - have):
        raise HubError(502, f"{remote.path}: {shown_host(answer.url)} announced {declared[:30]} bytes where "
                            f"{remote.size - have} were left of the {remote.size} the listing gives", "size_mismatch")


def mib(n: int) -> int:
    return max(0, n) // (1 << 20)
