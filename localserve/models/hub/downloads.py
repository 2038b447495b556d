"""One download per file however many pulls ask for it at once.

A Download runs fetch.fetch_file on its own thread; each pull that wants the same blob joins
it (one more watcher) and reads its progress. A pull whose client leaves lets go; when the
last watcher has let go the download stops at its next chunk, its partial file kept for the
next pull to resume. A pull that joins a download already stopping waits for it to end and
starts the next one. SHARED is the process's one registry: two servers in one process would
still share one file's download, which is what a registry of files is for.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from .errors import HubError
from .fetch import Cancelled


class Download:
    def __init__(self, key: str, total: int, work: Callable[[Callable[[int], None], threading.Event], Path]):
        self.key = key
        self.total = total
        self.completed = 0
        self.watchers = 0
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.path: Path | None = None
        self._work = work
        self.thread = threading.Thread(target=self._run, name=f"download {key[-20:]}", daemon=True)

    def _run(self) -> None:
        try:
            self.path = self._work(self._progress, self.cancelled)
        except BaseException as exc:       # handed to every watcher; a thread must not die silently
            self.error = exc
        finally:
            self.done.set()

    def _progress(self, completed: int) -> None:
        self.completed = completed

    def result(self) -> Path:
        """Once done: the blob, or what stopped it (HubError, Cancelled)."""
        if isinstance(self.error, (HubError, Cancelled)):
            raise self.error
        if self.error is not None:
            raise HubError(500, f"the download failed: {type(self.error).__name__}: {self.error}") from self.error
        assert self.path is not None
        return self.path


class Downloads:
    def __init__(self):
        self.lock = threading.Lock()
        self.running: dict[str, Download] = {}

    def join(self, key: str, total: int, work) -> Download:
        while True:
            with self.lock:
                current = self.running.get(key)
                if current is None or (current.done.is_set() and current.error is not None):
                    current = self.running[key] = Download(key, total, work)
                    current.watchers = 1
                    current.thread.start()
                    return current
                if not current.cancelled.is_set():
                    current.watchers += 1
                    return current
            current.done.wait()      # it is stopping for clients gone: the next download starts after it
            with self.lock:
                if self.running.get(key) is current:
                    del self.running[key]

    def leave(self, download: Download) -> None:
        with self.lock:
            download.watchers -= 1
            if download.watchers <= 0:
                if not download.done.is_set():
                    download.cancelled.set()
                if self.running.get(download.key) is download and download.done.is_set():
                    del self.running[download.key]

    def active(self) -> int:
        with self.lock:
            return sum(1 for d in self.running.values() if not d.done.is_set())


SHARED = Downloads()
