"""The embedded broker (SQLite through kombu) runs in WAL mode."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from core.doorbell import put_embedded_broker_in_wal


def journal_mode(path: Path) -> str:
    with closing(sqlite3.connect(path)) as connection:  # a later connection: the mode stays with the file
        return str(connection.execute("PRAGMA journal_mode").fetchone()[0])


def test_the_sqlite_broker_file_is_put_in_wal_mode(tmp_path: Path) -> None:
    path = tmp_path / "var" / "broker.db"
    put_embedded_broker_in_wal(f"sqla+sqlite:///{path}")
    assert journal_mode(path) == "wal"
