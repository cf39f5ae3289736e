"""What a database holds for the next process to open it (chaos.core.content): the last commit,
whatever else is in its files."""

from __future__ import annotations

import os
import sqlite3

from chaos.core.content import wal_digest


def _wal_db(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t (v TEXT)")
    conn.execute("INSERT INTO t VALUES ('committed')")
    return conn


def test_frames_a_transaction_wrote_before_its_commit_are_not_content(tmp_path):
    path = str(tmp_path / "x.db")
    conn = _wal_db(path)
    before = wal_digest(path)
    conn.execute("PRAGMA cache_size=1")  # the open transaction spills its pages into the WAL
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("INSERT INTO t VALUES (?)", [("x" * 500,)] * 200)
    wal_size = os.path.getsize(path + "-wal")
    assert wal_size > 20 * 4096, "the uncommitted pages must be in the WAL for this test to mean anything"
    assert wal_digest(path) == before
    conn.execute("COMMIT")
    assert wal_digest(path) not in (before, None)


def test_the_same_rows_committed_alike_in_two_files_are_the_same_content(tmp_path):
    a, b = str(tmp_path / "a.db"), str(tmp_path / "b.db")
    ca, cb = _wal_db(a), _wal_db(b)
    assert wal_digest(a) == wal_digest(b) is not None
    cb.execute("UPDATE t SET v = 'changed'")
    assert wal_digest(a) != wal_digest(b)
    ca.close(), cb.close()


def test_a_database_not_in_wal_mode_has_no_content_to_name(tmp_path):
    path = str(tmp_path / "x.db")
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("CREATE TABLE t (v)")
    assert wal_digest(path) is None
    assert wal_digest(str(tmp_path / "missing.db")) is None
