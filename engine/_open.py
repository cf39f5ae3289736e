"""Open the store a URL names: SQLite for a path, ``sqlite:///path`` or a ``file:`` URI, PostgreSQL
for ``postgresql://``.

>>> open_store(":memory:").backend
'sqlite'
>>> open_store("mysql://db/jobs")
Traceback (most recent call last):
...
engine._errors.InvalidInput: database url 'mysql://db/jobs': scheme 'mysql' is not supported; use a file path, sqlite:///path or postgresql://...
"""

from __future__ import annotations

from typing import Any

from ._errors import InvalidInput
from ._postgres import PostgresStore
from ._sqlite import SqliteStore
from ._store import Store

__all__ = ["open_store"]


def open_store(url: str, **options: Any) -> Store:
    """The store at ``url``, opened with the backend's ``options`` (e.g. ``busy_timeout_s``).

    psycopg is imported only when a ``postgresql://`` store is opened.
    """
    if url.startswith(("postgresql://", "postgres://")):
        options.pop("create", None)  # a PostgreSQL database is created by its administrator, never here
        options.pop("read_only", None)  # a SQLite option: it opens a file so that nothing is created or written
        return PostgresStore(url, **options)
    if "://" in url and not url.startswith(("sqlite:///", "file:")):
        scheme = url.split("://", 1)[0]
        raise InvalidInput(
            f"database url {url!r}: scheme {scheme!r} is not supported; use a file path, sqlite:///path or postgresql://..."
        )
    return SqliteStore(url, **options)
