"""The physical limit: raw sqlite3 compare-and-swap commits, one single-row UPDATE per transaction.

Every crashgate state change is such a transaction (plus the rows it carries), so this is the rate
no engine on a file with the same page size and the same ``synchronous`` setting can beat per
commit (the engine's files have 1 KiB pages, SQLite's default is 4 KiB: both are measured).

>>> from benchmarks._measure import temp_dir
>>> with temp_dir() as d:
...     cas_commits_per_s(d, commits=50, synchronous="NORMAL") > 0
True
"""

from __future__ import annotations

import os
import sqlite3
import time

__all__ = ["cas_commits_per_s", "ROWS"]

ROWS = 1_000  # the CAS walks over this many rows, so it is not one hot page forever

CREATE = "CREATE TABLE t (id INTEGER PRIMARY KEY, state INTEGER NOT NULL)"
INSERT = "INSERT INTO t (id, state) VALUES (?, 0)"
CAS = "UPDATE t SET state = :to WHERE id = :id AND state = :from"


def cas_commits_per_s(directory: str, *, commits: int, synchronous: str, page_size: int | None = None) -> float:
    """Commits per second of ``BEGIN IMMEDIATE; UPDATE ... WHERE state = :from; COMMIT`` on WAL,
    on a file with SQLite's default page size, or ``page_size`` (the engine's own, for example:
    a commit writes each page it changed whole, so a smaller page makes every commit cheaper)."""
    path = os.path.join(directory, f"limit-{synchronous.lower()}-{time.monotonic_ns()}.db")
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if page_size is not None:
            conn.execute(f"PRAGMA page_size = {int(page_size)}")  # before the file's first page
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")  # one of two constants
        conn.execute(CREATE)
        conn.execute("BEGIN")
        conn.executemany(INSERT, [(i,) for i in range(ROWS)])
        conn.execute("COMMIT")
        started = time.perf_counter()
        for i in range(commits):
            conn.execute("BEGIN IMMEDIATE")
            changed = conn.execute(CAS, {"id": i % ROWS, "from": i // ROWS, "to": i // ROWS + 1}).rowcount
            conn.execute("COMMIT")
            if changed != 1:
                raise AssertionError(f"CAS {i} changed {changed} rows; the benchmark table is corrupt")
        return commits / (time.perf_counter() - started)
    finally:
        conn.close()
