"""Both stores mark their database, refuse a foreign or newer one untouched, and offer one interface."""

import inspect
import subprocess
import sys

import pytest

from engine import PostgresStore, SchemaMismatch, SqliteStore, open_store


def test_a_database_of_another_application_is_refused_and_not_modified(backend):
    backend.plant_foreign_table()
    before = backend.fingerprint()
    with pytest.raises(SchemaMismatch, match="not created by crashgate.*invoices"):
        open_store(backend.url)
    assert backend.fingerprint() == before


def test_a_database_from_a_newer_engine_is_refused_and_not_modified(backend):
    open_store(backend.url).close()
    backend.set_schema_version(99)
    before = backend.fingerprint()
    with pytest.raises(SchemaMismatch, match="schema version 99.*upgrade crashgate"):
        open_store(backend.url)
    assert backend.fingerprint() == before


def test_reopening_a_crashgate_database_keeps_its_jobs(open_db, clock):
    open_db().submit("doc-1", {"source": "a"}, now=clock.now())
    assert [job.id for job in open_db().jobs()] == ["doc-1"]


def test_open_store_picks_the_backend_from_the_url(backend, store):
    assert store.backend == backend.name
    assert isinstance(store, SqliteStore if backend.name == "sqlite" else PostgresStore)


def test_both_stores_have_the_same_public_methods_and_signatures():
    def public(cls):
        return {
            name: inspect.signature(member)
            for name, member in inspect.getmembers(cls, inspect.isfunction)
            if not name.startswith("_")
        }

    assert public(PostgresStore) == public(SqliteStore)


def test_the_command_line_runs_a_job_and_reports_status_on_this_backend(db_url):
    def cli(*args):
        out = subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert cli("submit", "--db", db_url, "doc-1", '{"source": "doc-1"}').strip() == "doc-1: pending"
    assert '"done": 1' in cli("work", "--db", db_url)
    assert "delivered              1" in cli("status", "--db", db_url)
    assert "same output as stored" in cli("replay", "--db", db_url, "doc-1", "extract")
