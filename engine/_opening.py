"""Opening a SQLite database file: check the path first, and say in one line what went wrong.

SQLite reports most opening failures as ``unable to open database file`` or ``disk I/O error``,
whatever the cause. Before it is asked, :func:`check_sqlite_path` names the usual causes (a
missing directory, a directory, a missing file where none may be created, a file this user may
not read or write); after a failure, :func:`sqlite_open_error` turns what SQLite said into the
engine's typed error, naming the file and what to do. Nothing is written by either.

>>> check_sqlite_path(":memory:", create=False)
>>> check_sqlite_path("/no/such/dir/e.db", create=True)
Traceback (most recent call last):
    ...
engine._errors.InvalidInput: database '/no/such/dir/e.db': directory '/no/such/dir' does not exist; create it (mkdir -p '/no/such/dir') or pass another path
"""

from __future__ import annotations

import os
import sqlite3
import stat
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from ._errors import EngineError, InvalidInput, SchemaMismatch, StoreBusy, StoreFailed
from ._inputs import check_text

__all__ = ["check_sqlite_path", "sqlite_connect_target", "sqlite_file", "sqlite_open_error"]

MEMORY = ":memory:"
SQLITE_URL = "sqlite:///"
FILE_URI = "file:"


def sqlite_file(db: str) -> str:
    """The file a SQLite database argument names: a path, ``sqlite:///path`` or a ``file:`` URI's
    path (percent-decoded); ``:memory:`` for an in-memory database.

    >>> sqlite_file("sqlite:///jobs.db"), sqlite_file("file:/srv/my%20jobs.db?cache=private")
    ('jobs.db', '/srv/my jobs.db')
    """
    return _split(db)[0]


def sqlite_connect_target(db: str, *, read_only: bool) -> tuple[str, bool]:
    """``(database, uri)`` for :func:`sqlite3.connect` to open the database argument ``db``.

    A ``file:`` URI is opened as a URI (as a plain name, sqlite3 would make a file literally called
    ``file:...``), rebuilt from the path :func:`check_sqlite_path` checked. ``read_only`` opens with
    ``mode=ro``: SQLite then never creates the file, and never writes to it or beside it (no
    journal), whatever the file turns out to be.

    >>> sqlite_connect_target("jobs.db", read_only=False)
    ('jobs.db', False)
    >>> sqlite_connect_target("file:/srv/jobs.db?mode=rwc&cache=private", read_only=True)
    ('file:///srv/jobs.db?cache=private&mode=ro', True)
    """
    path, query = _split(db)
    if query is None and not read_only:
        return path, False
    if path == MEMORY:
        return (db, True) if query is not None else (path, False)
    params = [(key, value) for key, value in query or () if not (read_only and key == "mode")]
    if read_only:
        params.append(("mode", "ro"))
    return f"file://{quote(os.path.abspath(path))}" + (f"?{urlencode(params, quote_via=quote)}" if params else ""), True


def _split(db: str) -> tuple[str, list[tuple[str, str]] | None]:
    """The file ``db`` names and, for a ``file:`` URI, its query (None for a path)."""
    if db.startswith(SQLITE_URL):
        return db[len(SQLITE_URL):], None
    if not db.startswith(FILE_URI):
        return db, None
    parts = urlsplit(db)
    if parts.netloc not in ("", "localhost"):
        raise InvalidInput(f"database {db!r} names host {parts.netloc!r}; a file: URI names a local file: pass file:/path/to/engine.db, or the path itself")
    query = parse_qsl(parts.query, keep_blank_values=True)
    path = unquote(parts.path)
    if path == MEMORY or ("mode", "memory") in query:
        return MEMORY, query
    if not path:
        raise InvalidInput(f"database {db!r} names no file; pass file:/path/to/engine.db, or the path itself")
    return path, query


def check_sqlite_path(path: str, *, create: bool) -> None:
    """Raise :class:`InvalidInput` if ``path`` cannot be a database file this process may use.

    ``path`` is a file (see :func:`sqlite_file`), never a URI. ``create=False`` (every command but
    ``submit`` and ``example``) refuses a path where no file exists yet, so that a typo does not
    leave an empty database behind.
    """
    check_text(path, f"database path {path!r}")  # sqlite3 cannot open a path holding NUL or a lone surrogate
    if path == MEMORY:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise InvalidInput(f"database {path!r}: directory {directory!r} does not exist; create it (mkdir -p {directory!r}) or pass another path")  # not a crash point: a bad database path, refused when the store opens
    if os.path.isdir(path):
        raise InvalidInput(f"database {path!r} is a directory; pass a file path, e.g. {os.path.join(path, 'engine.db')!r}")  # not a crash point: a bad database path, refused when the store opens
    if os.path.exists(path) and not stat.S_ISREG(os.stat(path).st_mode):
        # A device or a pipe: SQLite would read it as an empty database and write a schema into it,
        # and its journal beside it (/dev/null-journal, as root).
        raise InvalidInput(f"database {path!r} is not a regular file; pass the path of a database file, e.g. engine.db")  # not a crash point: a bad database path, refused when the store opens
    if not os.path.exists(path):
        if not create:  # not a crash point: a database file is created before any job is submitted
            raise InvalidInput(
                f"database {path!r} does not exist; check the path (this command creates no database: "
                "`python -m engine submit` does)"
            )
        if not os.access(directory, os.W_OK | os.X_OK):  # not a crash point: a database file is created before any job is submitted
            raise InvalidInput(f"database {path!r}: no permission to create a file in {directory!r}; pass a path in a directory you may write to")
        return  # not a crash point: a database file is created before any job is submitted
    if _read_only(path):
        raise _read_only_error(path, "mounted read-only")  # not a crash point: a bad database path, refused when the store opens
    if not os.access(path, os.R_OK | os.W_OK):
        raise InvalidInput(  # not a crash point: a bad database path, refused when the store opens
            f"database {path!r}: permission denied (mode {oct(os.stat(path).st_mode & 0o777)}); the engine reads "
            "and writes it (even status: WAL mode): run as its owner, or fix its mode (chmod u+rw)"
        )


def sqlite_open_error(path: str, exc: sqlite3.Error) -> EngineError:
    """The typed error for a failure while opening ``path`` (connecting, reading the schema, WAL)."""
    code = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
    text = f"{exc}".strip()
    if "not a database" in text or code == "SQLITE_NOTADB":
        return SchemaMismatch(
            f"database {path!r} is not a SQLite database ({text}); it was not modified: pass the path of a "
            "crashgate database, or of a file that does not exist yet"
        )
    if "locked" in text or "busy" in text:
        return StoreBusy(f"database {path!r} is locked by another process ({text}); try again later")
    if _read_only(path) or "readonly" in text or "read-only" in text:
        return _read_only_error(path, f"{code}: {text}")
    if code.startswith("SQLITE_CORRUPT") or "malformed" in text:
        return StoreFailed(
            f"database {path!r} is damaged ({code}: {text}); nothing was written: restore it from a backup, "
            f"or recover what is left with `sqlite3 {path} .recover`"
        )
    if code.startswith("SQLITE_IOERR") or "I/O error" in text:
        return StoreFailed(
            f"database {path!r}: an I/O error while opening ({code}: {text}); nothing was written: check the device "
            f"and free disk space; if {path + '-wal'!r} was deleted while the database was in use, restore it "
            "(or, losing the commits it held, delete the -shm file too)"
        )
    return StoreFailed(f"database {path!r} cannot be opened ({code}: {text}); check the path, its permissions and the device")


def _read_only_error(path: str, detail: str) -> StoreFailed:
    return StoreFailed(
        f"database {path!r} is on a read-only file system or is read-only ({detail}); the engine writes "
        "even to read it (WAL mode): remount it read-write, or copy the database to a writable place"
    )


def _read_only(path: str) -> bool:
    """Whether the file system holding ``path`` is mounted read-only."""
    try:
        return bool(os.statvfs(os.path.dirname(os.path.abspath(path))).f_flag & os.ST_RDONLY)
    except OSError:  # not a crash point: a directory the file system cannot describe, when the store opens
        return False
