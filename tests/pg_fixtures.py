"""A throwaway PostgreSQL server for the test session, and a fresh database for each test.

Each test process (each xdist worker) starts its own server from the installed binaries (about
a second), and each test gets a new database copied from ``template0`` (about 50 ms) that is
dropped afterwards. Without server binaries or psycopg the PostgreSQL tests skip with a one-line
reason; with ``CI=true`` that is a failure instead, so CI cannot pass by testing one backend only.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
from typing import Iterator

import pytest

from engine.pgserver import ServerUnavailable, TemporaryPostgres

_database_numbers = itertools.count()


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def require(reason: str | None) -> None:
    """Go on when ``reason`` is None; else skip saying what is missing, or fail under ``CI=true``
    (CI must not pass without the real component)."""
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"CI=true and {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[TemporaryPostgres]:
    """A PostgreSQL server on a free loopback port, removed with its data at the end."""
    try:
        if importlib.util.find_spec("psycopg") is None:
            raise ServerUnavailable("psycopg is not installed (pip install -e '.[postgres]')")
        server = TemporaryPostgres()
    except ServerUnavailable as exc:
        if in_ci():
            pytest.fail(f"CI=true and PostgreSQL is unavailable: {exc}", pytrace=False)
        pytest.skip(f"PostgreSQL unavailable: {exc}")
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_url(pg_server: TemporaryPostgres) -> Iterator[str]:
    """The URL of a new, empty database on the session's server, dropped after the test."""
    name = f"test_{next(_database_numbers)}"
    url = pg_server.create_database(name)
    yield url
    pg_server.drop_database(name)
