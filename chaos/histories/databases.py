"""The databases random histories run on: a fresh one per history, copied from a template the
adapter created once per process (a file copied, or a server's template database cloned), under
one scratch folder per process; and another connection holding the write lock (``lock-held``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sqlite3
import tempfile
from typing import Any, TYPE_CHECKING

from chaos.core.store_faults import HeldLock, small_pages
from chaos.matrix.work import scratch_dir
from chaos.core.process import run_in_child

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = [
    "FROZEN_BUSY_TIMEOUT_S", "scratch_root", "TEMPLATES", "server_side", "create", "hold_write_lock", "page_count",
    "drop_templates"
]

# Once a worker has been frozen, every other write waits at most this long for the write lock it
# may hold, then backs off (run_once answers "busy", a submit or a person's action is refused as
# busy, having changed nothing).
FROZEN_BUSY_TIMEOUT_S = 0.05


_ROOT: dict[int, str] = {}


def scratch_root() -> str:
    """One scratch directory per process (on tmpfs where there is one); histories live under it."""
    root = _ROOT.get(os.getpid())
    if root is None or not os.path.isdir(root):
        root = _ROOT[os.getpid()] = scratch_dir()
        atexit.register(shutil.rmtree, root, True)
    return root


TEMPLATES: dict[tuple[int, int], str] = {}


def server_side(adapter: Target) -> bool:
    """Whether the adapter makes its databases itself (PostgreSQL) instead of engine.db files."""
    return adapter.server is not None


def create(adapter: Target, directory: str) -> str:
    """A fresh database for a history in ``directory``: a copy of one the adapter created once in
    this process; returns its ``db`` (``<directory>/engine.db``, or the adapter's own database).

    It is created with writer attribution (the fenced-writes check) where the adapter offers it.
    Copying the closed file costs a tenth of creating the schema and triggers every history. An
    adapter whose databases are not files (``template_db``, ``new_scenario_db``, ``drop_db``) makes
    the template database once and a copy of it per history, which teardown drops.
    """
    key = (os.getpid(), id(adapter))
    template = TEMPLATES.get(key)
    server = adapter.server
    if server is not None:
        if template is None:
            template = server.template_db(directory)
            _create_schema(adapter, template)
            TEMPLATES[key] = template
            _SERVER_TEMPLATES.append((server, template))
        return server.new_scenario_db(template, directory)
    if template is None or not os.path.exists(os.path.join(template, "engine.db")):
        template = TEMPLATES[key] = tempfile.mkdtemp(prefix="template-", dir=scratch_root())
        _create_schema(adapter, os.path.join(template, "engine.db"))
    for name in ("engine.db", "engine.db-wal"):  # never a -shm: the first connection rebuilds it
        if os.path.exists(os.path.join(template, name)):
            shutil.copyfile(os.path.join(template, name), os.path.join(directory, name))
    return os.path.join(directory, "engine.db")


def _create_schema(adapter: Target, db: str) -> None:
    # A file database gets the smallest pages SQLite allows: a few rows fill a page, so a full
    # disk (max_page_count at the current size) shows within a write or two, as it does in life.
    if not server_side(adapter):
        adapter = small_pages(adapter)
    run_in_child(lambda: adapter.create(db), what="the adapter's create")


class _SqliteWriteLock:
    """Another connection in ``BEGIN IMMEDIATE`` on a SQLite file, until :meth:`release`."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def release(self) -> None:
        try:
            self.conn.execute("ROLLBACK")
        finally:
            self.conn.close()


def hold_write_lock(adapter: Target, db: str) -> Any:
    """Another connection holding what every write of the engine needs (SQLite's write lock;
    on a server, the engine's tables in EXCLUSIVE mode), or None if a frozen worker holds it."""
    if server_side(adapter):
        return HeldLock.take(db, adapter.schema)
    conn = sqlite3.connect(db, timeout=FROZEN_BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:
        conn.close()
        return None
    return _SqliteWriteLock(conn)


def page_count(db: str) -> int:
    conn = sqlite3.connect(db)
    try:
        return int(conn.execute("PRAGMA page_count").fetchone()[0])
    finally:
        conn.close()


_SERVER_TEMPLATES: list[tuple[Any, str]] = []


def drop_templates() -> None:
    """Drop the template databases this process made on database servers (also run at exit)."""
    while _SERVER_TEMPLATES:
        server, template = _SERVER_TEMPLATES.pop()
        for key, value in list(TEMPLATES.items()):
            if value == template:
                del TEMPLATES[key]
        try:
            server.drop_db(template)
        except Exception:  # the server may be gone already: its data goes with it
            pass


atexit.register(drop_templates)
