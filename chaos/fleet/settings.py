"""The demo's and the soak's numbers and database path, checked before any process starts.

Each check returns the message for a bad value (naming the option and what to pass) or None:
NaN passes every comparison (a NaN monkey gap turned the monkey off without a word), infinity
divides into zero, a lease of 0 or a path in a missing folder failed in every worker with a
traceback, and a URL where a path belongs made a folder named ``sqlite:``.

>>> check_numbers(jobs=10, workers=2, kill_every=float("nan"), lease=30.0)
'--kill-every nan: pass a finite number of seconds (0 turns the monkey off)'
>>> check_numbers(jobs=10, workers=2, kill_every=1.0, lease=30.0) is None
True
"""

from __future__ import annotations

import math
import os
import tempfile

from engine import LEASE_S_MAX

__all__ = ["check_numbers", "check_new_sqlite_path", "JOBS_MAX", "WORKERS_MAX"]

JOBS_MAX = 10_000_000  # a soak of a day at the fleet's pace; more is a typo
WORKERS_MAX = 256  # worker processes on one machine


def check_numbers(*, jobs: int, workers: int, kill_every: float, lease: float, timeout: float | None = None,
                  power_every: float | None = None) -> str | None:
    if not 1 <= jobs <= JOBS_MAX:
        return f"--jobs {jobs}: pass from 1 to {JOBS_MAX:,}"
    if not 1 <= workers <= WORKERS_MAX:
        return f"--workers {workers}: pass from 1 to {WORKERS_MAX}"
    if not math.isfinite(kill_every) or kill_every < 0:
        return f"--kill-every {kill_every:g}: pass a finite number of seconds (0 turns the monkey off)"
    if not math.isfinite(lease) or not 0 < lease <= LEASE_S_MAX:
        return f"--lease {lease:g}: pass a number of seconds > 0 and at most {LEASE_S_MAX:.0f} (a week)"
    if timeout is not None and (not math.isfinite(timeout) or timeout <= 0):
        return f"--timeout {timeout:g}: pass a finite number of seconds > 0"
    if power_every is not None and (not math.isfinite(power_every) or power_every < 0):
        return f"--power-every {power_every:g}: pass a finite number of seconds (0: no power cuts)"
    return None


def check_new_sqlite_path(db: str) -> str | None:
    """A new SQLite file's path: a plain path (not a URL), in a folder where a file can be made."""
    if not db or "://" in db or db == ":memory:":
        return f"--db {db!r}: pass the path of a new SQLite file, e.g. --db run.db (not a URL, not an in-memory database)"
    folder = os.path.dirname(os.path.abspath(db))
    if not os.path.isdir(folder):
        return f"--db {db}: the folder {folder} does not exist; create it or pass a path in a folder that does"
    try:  # made and removed at once: the file system says whether it can (read-only, /proc), a permission check does not
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        return f"--db {db}: no file can be made in {folder} ({exc.strerror}); pass a path in a writable folder"
    return None
