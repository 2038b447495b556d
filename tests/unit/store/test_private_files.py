"""Stored conversations are readable by their user only (issue 28, item 5)."""

from __future__ import annotations

import logging
import os
import stat

import pytest

from localserve.store.store import Store


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def open_umask():
    """The umask most systems start with: new files 0644, directories 0755."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_data_directory_and_database_are_private(tmp_path, open_umask):
    data = tmp_path / "data" / "localserve"
    with Store(str(data / "localserve.db")) as store:
        store._db.execute("CREATE TABLE IF NOT EXISTS probe (x)")    # a write: the WAL and SHM exist now
        store._db.execute("INSERT INTO probe VALUES (1)")
        assert mode(data) == 0o700
        for name in ("localserve.db", "localserve.db-wal", "localserve.db-shm"):
            assert mode(data / name) == 0o600, name


def test_an_existing_open_directory_is_fixed_at_start_with_a_log_line(tmp_path, open_umask, caplog):
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)
    for name in ("localserve.db", "localserve.db-wal", "localserve.db-shm"):
        (data / name).touch()
        os.chmod(data / name, 0o644)
    with caplog.at_level(logging.WARNING, logger="localserve.store"):
        Store(str(data / "localserve.db")).close()
    assert mode(data) == 0o700
    assert all(mode(data / name) == 0o600 for name in ("localserve.db", "localserve.db-wal", "localserve.db-shm")
               if (data / name).exists())
    assert "was open to other users" in caplog.text and str(data) in caplog.text


def test_a_private_directory_is_left_alone(tmp_path, caplog):
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    with caplog.at_level(logging.WARNING, logger="localserve.store"):
        Store(str(data / "localserve.db")).close()
    assert "open to other users" not in caplog.text
