"""When the engine cannot go on: one log line, stored state left sound, exit status 3.

Some states cannot be served from: llama.cpp aborting (a failed assertion inside it), or the
runtime thread failing step after step. Rather than abort mid-write or hang every client,
the process says why, marks the responses still running as failed in the store, closes it,
and exits with EXIT_ENGINE_FAILED; a supervisor starts it again (contrib/localserve.service
has Restart=on-failure). Clients' connections close; a stream ends without its final event.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Callable, NoReturn

log = logging.getLogger("localserve")

EXIT_ENGINE_FAILED = 3     # docs/operations.rst's "Exit status" lists every status the process ends with
CLEANUP_SECONDS = 2.0      # the most the clean-up may take: the exit must not hang on a stuck lock

_cleanups: list[Callable[[], None]] = []
_exiting = threading.Lock()


def at_engine_failure(cleanup: Callable[[], None]) -> Callable[[], None]:
    """Run `cleanup` (best effort, bounded in time) before the process exits for good; returns
    what takes it off the list again, for its owner to call when it closes."""
    _cleanups.append(cleanup)
    return lambda: _forget(cleanup)


def _forget(cleanup: Callable[[], None]) -> None:
    try:
        _cleanups.remove(cleanup)
    except ValueError:      # taken off already
        pass


def exit_engine_failed(reason: str) -> NoReturn:
    if not _exiting.acquire(blocking=False):     # another thread is already on its way out
        threading.Event().wait()
    log.critical("%s: the engine cannot go on; exiting with status %d so that a supervisor starts the "
                 "server again", reason, EXIT_ENGINE_FAILED)
    worker = threading.Thread(target=_clean_up, name="exit-cleanup", daemon=True)
    worker.start()
    worker.join(CLEANUP_SECONDS)
    flush_logs()
    os._exit(EXIT_ENGINE_FAILED)


def _clean_up() -> None:
    for cleanup in list(_cleanups):     # an owner closing on another thread may take itself off
        try:
            cleanup()
        except Exception:      # noqa: BLE001 - exiting anyway
            log.exception("clean-up before exit failed")


def flush_logs() -> None:
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:      # noqa: BLE001 - exiting anyway
            pass
    sys.stderr.flush()
    sys.stdout.flush()
