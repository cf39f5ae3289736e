"""The harness's own connections, one per process and thread.

A step of an engine may run in any thread (DBOS runs each workflow in a thread of its own, huey's
consumer has workers), and the harness reads and writes at each paid call: the world's ledger, the
probe's read of the engine's database. One sqlite3 connection used by two threads at once mixes
their transactions (a ``BEGIN`` meets another thread's open one) and can leave a statement
unfinished, holding its read lock; so each thread gets its own, and a forked child opens its own
rather than use its parent's.

>>> import os, sqlite3, tempfile, threading
>>> conns = ThreadConnections(sqlite3.connect, os.path.join(tempfile.mkdtemp(), "x.db"), check_same_thread=False)
>>> mine = conns.get()
>>> mine is conns.get()
True
>>> other = []
>>> t = threading.Thread(target=lambda: other.append(conns.get())); t.start(); t.join()
>>> other[0] is mine
False
>>> conns.close()
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

__all__ = ["ThreadConnections"]


class ThreadConnections:
    """Connections made by ``opener(*args, **kwargs)``, one per (process, thread), made when first
    asked for. ``opener`` must give a connection any thread may close (``check_same_thread=False``):
    :meth:`close` closes this process's connections from whichever thread calls it."""

    def __init__(self, opener: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._open = (opener, args, kwargs)
        self._conns: dict[tuple[int, int], Any] = {}

    def get(self) -> Any:
        """This thread's connection (a thread whose id was another's before takes that one over:
        the other thread has ended, so no two threads use it at once)."""
        key = (os.getpid(), threading.get_ident())
        conn = self._conns.get(key)
        if conn is None:
            opener, args, kwargs = self._open
            conn = self._conns[key] = opener(*args, **kwargs)
        return conn

    def close(self) -> None:
        """Close this process's connections; those copied from a parent by fork are the parent's."""
        pid = os.getpid()
        conns, self._conns = self._conns, {}
        for (owner, _), conn in conns.items():
            if owner == pid:
                conn.close()
