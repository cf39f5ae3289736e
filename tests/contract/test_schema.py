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


@pytest.mark.parametrize(("version", "message"), [
    (99, "schema version 99.*upgrade crashgate"),  # from a newer engine
    (0, "schema version 0, which no crashgate wrote"),
])
def test_a_database_of_a_schema_version_this_engine_cannot_open_is_refused_and_not_modified(backend, version, message):
    open_store(backend.url).close()
    backend.set_schema_version(version)
    before = backend.fingerprint()
    with pytest.raises(SchemaMismatch, match=message):
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


# Schema version 1 as it was created (the payload a column of job), in the dialect's templates.
SCHEMA_V1 = (
    """CREATE TABLE job (
        id {text_key} PRIMARY KEY, workflow TEXT NOT NULL, state {text_key} NOT NULL, payload TEXT NOT NULL, result TEXT,
        attempts INTEGER NOT NULL DEFAULT 0, next_run_at {real}, lease_until {real}, lease_owner TEXT,
        lease_token {big_integer} NOT NULL DEFAULT 0, last_error {text_key}, created {real} NOT NULL, updated {real} NOT NULL)""",
    "CREATE INDEX job_due ON job (next_run_at) WHERE next_run_at IS NOT NULL",
    """CREATE TABLE step_result (
        job_id {text_key} NOT NULL, step {text_key} NOT NULL, output TEXT NOT NULL, cost {real} NOT NULL DEFAULT 0,
        at {real} NOT NULL, PRIMARY KEY (job_id, step)){without_rowid}""",
    """CREATE TABLE outbox (
        id {row_id}, job_id {text_key} NOT NULL, kind {text_key} NOT NULL, payload TEXT NOT NULL, created {real} NOT NULL,
        sent_at {real}, attempts INTEGER NOT NULL DEFAULT 0, next_attempt_at {real} NOT NULL, last_error TEXT,
        UNIQUE (job_id, kind))""",
    "CREATE INDEX outbox_due ON outbox (next_attempt_at) WHERE sent_at IS NULL",
)
# A job finished under version 1, and one waiting for its first claim.
ROWS_V1 = (
    "INSERT INTO job (id, workflow, state, payload, result, next_run_at, created, updated) "
    """VALUES ('doc-0', 'reference', 'delivered', '{"source":"doc-0"}', '{"key":"doc-0:delivery"}', NULL, 1, 5)""",
    "INSERT INTO job (id, workflow, state, payload, next_run_at, created, updated) "
    """VALUES ('doc-1', 'reference', 'pending', '{"source":"doc-1"}', 2, 2, 2)""",
    """INSERT INTO step_result (job_id, step, output, cost, at) VALUES ('doc-0', 'fetch', '{"text":"Report doc-0"}', 0.25, 3)""",
)


def _create_version_1(backend) -> None:
    from engine._sql import POSTGRESQL, SQLITE

    if backend.name == "sqlite":
        statements = [*(SQLITE.render(s) for s in SCHEMA_V1), *ROWS_V1]
        statements += ["PRAGMA application_id = 1667719540", "PRAGMA user_version = 1"]
    else:
        statements = [*(POSTGRESQL.render(s) for s in SCHEMA_V1), *ROWS_V1]
        statements += [
            "CREATE TABLE crashgate_schema (one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one), application_id BIGINT NOT NULL, version INTEGER NOT NULL)",
            "INSERT INTO crashgate_schema (application_id, version) VALUES (1667719540, 1)",
        ]
    for statement in statements:
        backend.execute(statement)


def test_a_version_1_database_is_upgraded_in_place_and_its_jobs_go_on(backend, clock, workflow):
    """Version 2 keeps a job's payload in job_payload: opening a version-1 database moves each
    payload there in one transaction, and its jobs, memo rows and idempotency keys are as before."""
    from engine import IdempotencyConflict, Worker

    _create_version_1(backend)
    store = open_store(backend.url)
    try:
        jobs = {job.id: job for job in store.jobs()}
        assert {job_id: (job.state, job.payload, job.result) for job_id, job in jobs.items()} == {
            "doc-0": ("delivered", {"source": "doc-0"}, {"key": "doc-0:delivery"}),
            "doc-1": ("pending", {"source": "doc-1"}, None),
        }
        assert store.memos("doc-0") == {"fetch": {"text": "Report doc-0"}}
        assert store.submit("doc-1", {"source": "doc-1"}, now=clock.now()).state == "pending"
        with pytest.raises(IdempotencyConflict):
            store.submit("doc-1", {"source": "other"}, now=clock.now())
        result = Worker(store, workflow, clock=clock, threaded=False).run_once()
        assert (result.outcome, result.job_id) == ("done", "doc-1")
    finally:
        store.close()
    assert backend.schema_version() == 2
    reopened = open_store(backend.url)  # version 2 now: opened as it is
    try:
        assert [job.state for job in reopened.jobs()] == ["delivered", "delivered"]
    finally:
        reopened.close()


def test_a_new_sqlite_database_has_the_engines_page_size(tmp_path):
    from engine._sqlite import PAGE_SIZE

    store = SqliteStore(str(tmp_path / "new.db"))
    try:
        assert store.conn.execute("PRAGMA page_size").fetchone()[0] == PAGE_SIZE == 1024
    finally:
        store.close()


def test_on_postgresql_a_job_an_older_worker_inserts_during_the_upgrade_keeps_its_payload(backend):
    """The upgrade locks job before it copies the payloads: a job that a worker of version 1
    inserts meanwhile is either copied or waits for the upgrade (and then fails, loudly), never
    left without its payload."""
    if backend.name != "postgresql":
        pytest.skip("SQLite lets one writer at a time in: the upgrade's transaction excludes the older worker's")
    import threading

    import psycopg

    _create_version_1(backend)
    older = psycopg.connect(backend.url)  # a worker of version 1, mid-transaction
    older.execute("INSERT INTO job (id, workflow, state, payload, next_run_at, created, updated) "
                  """VALUES ('doc-2', 'reference', 'pending', '{"source":"doc-2"}', 3, 3, 3)""")
    committer = threading.Timer(1.0, older.commit)  # while the upgrade waits for the table
    committer.start()
    try:
        store = open_store(backend.url)
    finally:
        committer.join()
        older.close()
    try:
        assert {job.id: job.payload for job in store.jobs()} == {
            "doc-0": {"source": "doc-0"}, "doc-1": {"source": "doc-1"}, "doc-2": {"source": "doc-2"}}
    finally:
        store.close()
