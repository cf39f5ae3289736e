"""The store contract: every test in this directory runs once per backend, SQLite and PostgreSQL.

A test asks for ``store`` (an alias of ``backend_store``) and, for a second connection to the same
database, ``open_db()``. What cannot be said in portable SQL (planting a foreign table, holding a
row lock, fingerprinting the database) goes through ``backend``, one small class per backend.
"""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import contextmanager
from typing import Any, Iterator

import pytest

from engine import open_store

BACKENDS = ("sqlite", "postgresql")


class SqliteBackend:
    name = "sqlite"
    full_scan = "SCAN job"  # what the claim's plan must not contain

    def __init__(self, url: str) -> None:
        self.url = url

    def execute(self, sql: str) -> None:
        conn = sqlite3.connect(self.url)
        with conn:
            conn.execute(sql)
        conn.close()

    def plant_foreign_table(self) -> None:
        self.execute("CREATE TABLE invoices (id INTEGER)")

    def set_schema_version(self, version: int) -> None:
        self.execute(f"PRAGMA user_version = {int(version)}")

    def schema_version(self) -> int:
        conn = sqlite3.connect(self.url)
        try:
            return conn.execute("PRAGMA user_version").fetchone()[0]
        finally:
            conn.close()

    def fingerprint(self) -> str:
        with open(self.url, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()

    def claim_scans_everything(self, plan: str) -> bool:
        return "SCAN job" in plan.replace("USING INDEX", "")

    @contextmanager
    def write_lock_held(self, job_id: str) -> Iterator[None]:
        """Another connection holds the lock a write to ``job_id`` needs (SQLite: the database's)."""
        conn = sqlite3.connect(self.url, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()


class PostgresBackend:
    name = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url

    def _connect(self) -> Any:
        import psycopg

        return psycopg.connect(self.url, autocommit=True)

    def execute(self, sql: str, params: Any = None) -> list[tuple]:
        with self._connect() as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def plant_foreign_table(self) -> None:
        self.execute("CREATE TABLE invoices (id INTEGER)")

    def set_schema_version(self, version: int) -> None:
        self.execute("UPDATE crashgate_schema SET version = %(v)s", {"v": version})

    def schema_version(self) -> int:
        return self.execute("SELECT version FROM crashgate_schema")[0][0]

    def fingerprint(self) -> str:
        """Every relation in the database with its kind and size, and the schema mark if any."""
        relations = self.execute(
            "SELECT c.relname, c.relkind, pg_relation_size(c.oid) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema() ORDER BY 1"
        )
        mark = self.execute("SELECT * FROM crashgate_schema") if any(r[0] == "crashgate_schema" for r in relations) else []
        return repr((relations, mark))

    def claim_scans_everything(self, plan: str) -> bool:
        return "Seq Scan" in plan

    @contextmanager
    def write_lock_held(self, job_id: str) -> Iterator[None]:
        """Another connection holds the row lock a write to ``job_id`` needs."""
        with self._connect() as conn:
            with conn.transaction():
                conn.execute("SELECT id FROM job WHERE id = %(id)s FOR UPDATE", {"id": job_id})
                yield


@pytest.fixture(params=BACKENDS)
def backend(request, tmp_path) -> SqliteBackend | PostgresBackend:
    if request.param == "sqlite":
        return SqliteBackend(str(tmp_path / "engine.db"))
    return PostgresBackend(request.getfixturevalue("pg_url"))


@pytest.fixture
def db_url(backend) -> str:
    return backend.url


@pytest.fixture
def open_db(db_url):
    """Open another store on the test's database (another process's connection); closed at the end."""
    opened = []

    def open_(**options: Any) -> Any:
        store = open_store(db_url, **options)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def backend_store(open_db):
    return open_db()


@pytest.fixture
def store(backend_store):
    """The root conftest's ``store`` (and so ``make_worker``), on this test's backend."""
    return backend_store


def rows(store: Any, sql: str) -> list[dict[str, Any]]:
    """Run portable SQL without parameters on the store's connection; rows as dicts."""
    cursor = store.conn.execute(sql)
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]
