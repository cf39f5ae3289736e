"""Writer attribution of a claim that moves several columns in one UPDATE (``SqlSchema``).

Goal: ``fenced-writes`` reads the audit's writes in order, and an engine whose claim moves the
state and the lease in one statement (``UPDATE job SET state = ?, lease_owner = ?, ...``) must be
read as claim-then-state, so the new owner's own claim is never a write after the old owner's.
Method: a real SQLite file with the schema's triggers, two workers taking turns on one job through
the engine's own statements, then the invariant on the snapshot; a zombie's write after the claim
must still be reported.
"""

from __future__ import annotations

import sqlite3
import types

import pytest

from chaos.adapters.sql import JobTable, SqlSchema
from chaos.core.invariants import fenced_writes

CREATE_JOB = ("CREATE TABLE job (id TEXT PRIMARY KEY, state TEXT, payload TEXT, lease_owner TEXT, lease_until REAL,"
              " token INTEGER NOT NULL DEFAULT 0, next_run_at REAL, last_error TEXT, result TEXT)")
CREATE_MEMO = "CREATE TABLE step_result (job_id TEXT, step TEXT, output TEXT, cost REAL)"
CREATE_OUTBOX = "CREATE TABLE outbox (id INTEGER PRIMARY KEY, job_id TEXT, kind TEXT, sent_at REAL)"
# The ordinary claim: the next step's working state and the lease, in one statement.
CLAIM = {
    None: "UPDATE job SET state = ?, lease_owner = ?, lease_until = ? WHERE id = ? AND (lease_until IS NULL OR lease_until < ?)",
    "token": ("UPDATE job SET state = ?, lease_owner = ?, lease_until = ?, token = token + 1"
              " WHERE id = ? AND (lease_until IS NULL OR lease_until < ?)"),
}
FINISH = "UPDATE job SET state = ? WHERE id = ? AND lease_owner = ?"  # a done state; the lease runs out by itself
MEMO = "INSERT INTO step_result (job_id, step, output, cost) VALUES (?, ?, '{}', 0.01)"
LEASE_S = 30.0


def _engine(tmp_path, token):
    conn = sqlite3.connect(tmp_path / "engine.db", isolation_level=None)
    for statement in (CREATE_JOB, CREATE_MEMO, CREATE_OUTBOX):
        conn.execute(statement)
    schema = SqlSchema(JobTable(token=token))
    schema.check(conn)
    schema.install(conn, attribute_writers=True)
    writer = ["harness"]
    conn.create_function("chaos_writer", 0, lambda: writer[0])
    conn.execute("INSERT INTO job (id, state, payload) VALUES ('j', 'queued', '{}')")

    def as_worker(worker, sql, *params):
        writer[0] = worker
        return conn.execute(sql, params).rowcount

    return conn, schema, as_worker


def _fenced(schema, conn):
    return [v.detail for v in fenced_writes(types.SimpleNamespace(snapshot=schema.snapshot(conn)))]


@pytest.mark.parametrize("token", [None, "token"])
def test_a_claim_moving_the_state_and_the_owner_is_recorded_before_its_state_change(tmp_path, token):
    conn, schema, as_worker = _engine(tmp_path, token)
    assert as_worker("w1", CLAIM[token], "fetch:working", "w1", 0 + LEASE_S, "j", 0.0) == 1
    as_worker("w1", MEMO, "j", "fetch")
    assert as_worker("w1", FINISH, "fetch:done", "j", "w1") == 1
    # w1's lease ran out at t=30 while it still owns the job; w2 claims the next step at t=40.
    assert as_worker("w2", CLAIM[token], "extract:working", "w2", 40 + LEASE_S, "j", 40.0) == 1
    as_worker("w2", MEMO, "j", "extract")
    assert as_worker("w2", FINISH, "extract:done", "j", "w2") == 1
    assert _fenced(schema, conn) == []
    writes = schema.snapshot(conn).writes
    claim_w2 = writes.index(("j", "claim", "w2", "w2" if token is None else "2"))
    assert writes[claim_w2 + 1] == ("j", "state", "w2", "fetch:done -> extract:working"), writes
    assert writes[0][1] == "claim", writes  # w1's first claim, too, comes before its state change


@pytest.mark.parametrize("token", [None, "token"])
def test_an_old_owner_writing_after_the_new_claim_is_still_a_fenced_write(tmp_path, token):
    conn, schema, as_worker = _engine(tmp_path, token)
    as_worker("w1", CLAIM[token], "fetch:working", "w1", 0 + LEASE_S, "j", 0.0)
    as_worker("w2", CLAIM[token], "fetch:working", "w2", 40 + LEASE_S, "j", 40.0)  # w1 paused past its lease
    as_worker("w1", MEMO, "j", "fetch")  # the zombie wakes and commits its memo
    assert _fenced(schema, conn) == ["worker 'w1' wrote memo 'fetch' to job 'j' after 'w2' had taken it over"]


def test_a_state_change_without_a_claim_is_recorded_once(tmp_path):
    conn, schema, as_worker = _engine(tmp_path, None)
    as_worker("w1", CLAIM[None], "fetch:working", "w1", LEASE_S, "j", 0.0)
    as_worker("w1", FINISH, "fetch:done", "j", "w1")
    as_worker("w1", "UPDATE job SET lease_owner = NULL, lease_until = NULL, state = 'queued' WHERE id = 'j'")  # a release
    assert [w[1:] for w in schema.snapshot(conn).writes] == [
        ("claim", "w1", "w1"), ("state", "w1", "queued -> fetch:working"),
        ("state", "w1", "fetch:working -> fetch:done"), ("state", "w1", "fetch:done -> queued")]


def test_on_postgresql_a_claim_moving_the_state_and_the_token_is_recorded_before_its_state_change(pg_url):
    """The PostgreSQL writer audit is one trigger function for both: it must keep the claim first too."""
    import psycopg

    from chaos.adapters.postgres import SET_WRITER, PostgresReferenceAdapter

    PostgresReferenceAdapter(pg_url).create(pg_url, attribute_writers=True)
    claim = ("UPDATE job SET state = %s, lease_owner = %s, lease_until = %s, lease_token = lease_token + 1 "
             "WHERE id = 'j' AND (lease_until IS NULL OR lease_until < %s)")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("INSERT INTO job (id, workflow, state, created, updated) VALUES ('j', 'reference', 'fetched', 0, 0)")
        for worker, to, now in (("w1", "extracting", 0.0), ("w2", "extracted", 40.0)):
            conn.execute(SET_WRITER, (worker,))
            assert conn.execute(claim, (to, worker, now + LEASE_S, now)).rowcount == 1
        writes = conn.execute("SELECT job_id, kind, writer, detail FROM chaos_write ORDER BY seq").fetchall()
    assert writes == [("j", "claim", "w1", "1"), ("j", "state", "w1", "fetched -> extracting"),
                      ("j", "claim", "w2", "2"), ("j", "state", "w2", "extracting -> extracted")]
    assert fenced_writes(types.SimpleNamespace(snapshot=types.SimpleNamespace(writes=writes))) == []


def test_a_token_that_starts_null_still_records_every_state_change_and_the_first_claim(tmp_path):
    conn = sqlite3.connect(tmp_path / "engine.db", isolation_level=None)
    for statement in (CREATE_JOB.replace("token INTEGER NOT NULL DEFAULT 0", "token INTEGER"), CREATE_MEMO, CREATE_OUTBOX):
        conn.execute(statement)
    schema = SqlSchema(JobTable(token="token"))
    schema.install(conn, attribute_writers=True)
    conn.create_function("chaos_writer", 0, lambda: "w1")
    conn.execute("INSERT INTO job (id, state, payload) VALUES ('j', 'queued', '{}')")
    conn.execute("UPDATE job SET state = 'held' WHERE id = 'j'")  # a move with the token still NULL
    conn.execute("UPDATE job SET state = 'fetch:working', lease_owner = 'w1', token = 1 WHERE id = 'j'")
    assert [w[1:] for w in schema.snapshot(conn).writes] == [
        ("state", "w1", "queued -> held"), ("claim", "w1", "1"), ("state", "w1", "held -> fetch:working")]
