"""Planted bugs that only a power cut reveals.

Each variant passes the crash matrix: a SIGKILL leaves the kernel's page cache alive, so every
write that returned survives it, fsynced or not. Its docstring says what the bug is, what goes
wrong in production, and which check catches it under which fault.
"""

from __future__ import annotations

from typing import Any

from chaos import ReferenceAdapter
from engine import SqliteStore


class TrustsSynchronousOff(ReferenceAdapter):
    """A store that commits with ``synchronous=OFF`` whatever level it was given.

    The author read that WAL mode "cannot corrupt the database" and switched fsync off for
    speed, keeping ``synchronous=FULL`` in the configuration and in the promise to the callers:
    every commit that returned is on the disk. Under a kernel that lives on, nothing shows; a
    process crash loses nothing. After a power cut the last commits are gone although they were
    acknowledged: a submit the caller was told was accepted, a memo the next worker needed.
    Caught by **durable-commits** under ``power-full``.
    """

    catches = ("durable-commits",)
    faults = ("power-full",)

    def make_store(self, db_path: str) -> Any:
        store = SqliteStore(db_path, synchronous=self.synchronous)
        store.conn.execute("PRAGMA synchronous=OFF")  # BUG: "WAL mode is safe without fsync"
        return store


POWER = [TrustsSynchronousOff]
