"""The data directory is the user's alone: stored conversations, responses and the signing key.

The directory is 0700 and the database with its WAL and shared-memory files 0600. The database
file is created with that mode before SQLite opens it, and SQLite gives the -wal and -shm files
it creates later the database's own mode, so no other user can read them at any moment (a
process-wide umask would also touch files other threads create). A directory or files left
readable by an older version, or by hand, are fixed at start, with a log line saying so.
"""

from __future__ import annotations

import logging
import os
import stat

log = logging.getLogger("localserve.store")

DIR_MODE = 0o700
FILE_MODE = 0o600
SQLITE_COMPANIONS = ("", "-wal", "-shm")


def private_dir(path: str) -> None:
    """Create the directory 0700 (its parents as usual), or make an existing one 0700."""
    os.makedirs(path, mode=DIR_MODE, exist_ok=True)
    _restrict(path, DIR_MODE)


def private_database(path: str) -> None:
    """The database file created 0600 if missing; it and its WAL and SHM files made 0600."""
    os.close(os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE))      # an empty file is an empty database
    for suffix in SQLITE_COMPANIONS:
        if os.path.exists(path + suffix):
            _restrict(path + suffix, FILE_MODE)


def _restrict(path: str, wanted: int) -> None:
    mode = stat.S_IMODE(os.stat(path).st_mode)
    if mode & 0o077:
        os.chmod(path, wanted)
        log.warning("%s was open to other users (mode %04o): made %04o, as stored conversations are private",
                    path, mode, wanted)
