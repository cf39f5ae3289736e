"""The reference engine on PostgreSQL, as the harness inspects it: PL/pgSQL audit triggers, a snapshot.

:class:`PostgresReferenceAdapter` is :class:`~chaos.ReferenceAdapter` with a PostgreSQL database
URL in place of a SQLite path. ``create`` installs the audit: two tables and two PL/pgSQL
triggers that record every state change of a job and every change to a memo row as it commits,
whatever the engine's code believes. ``inspect`` reads the same :class:`~chaos.Snapshot` the
SQLite adapter reads, so every invariant runs unchanged on either backend.

>>> adapter = adapter_for("postgresql://app@127.0.0.1/jobs")
>>> type(adapter).__name__
'PostgresReferenceAdapter'
>>> type(adapter_for("demo.db")).__name__
'ReferenceAdapter'
"""

from __future__ import annotations

from typing import Any

from engine import PostgresStore

from ._adapter import JobView, OutboxView, ReferenceAdapter, Snapshot

__all__ = ["PostgresReferenceAdapter", "adapter_for", "is_postgres", "AUDIT_SQL_PG"]

AUDIT_SQL_PG = (
    """CREATE TABLE IF NOT EXISTS chaos_transition (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id TEXT, from_state TEXT, to_state TEXT)""",
    """CREATE TABLE IF NOT EXISTS chaos_memo_change (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, job_id TEXT, step TEXT, what TEXT)""",
    # A row trigger runs inside the writer's transaction, while it holds the job's row lock: the
    # audit rows of one job are numbered in the order its changes commit, and a rolled-back
    # change leaves no audit row.
    """CREATE OR REPLACE FUNCTION chaos_job_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'INSERT' THEN
            INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (NEW.id, NULL, NEW.state);
        ELSIF TG_OP = 'UPDATE' THEN
            IF OLD.state IS DISTINCT FROM NEW.state THEN
                INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (NEW.id, OLD.state, NEW.state);
            END IF;
        ELSE
            INSERT INTO chaos_transition (job_id, from_state, to_state) VALUES (OLD.id, OLD.state, NULL);
        END IF;
        RETURN NULL;
    END $$""",
    """CREATE OR REPLACE FUNCTION chaos_memo_audit() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO chaos_memo_change (job_id, step, what)
        VALUES (OLD.job_id, OLD.step, CASE WHEN TG_OP = 'UPDATE' THEN 'updated' ELSE 'deleted' END);
        RETURN NULL;
    END $$""",
    "DROP TRIGGER IF EXISTS chaos_job_audit ON job",
    """CREATE TRIGGER chaos_job_audit AFTER INSERT OR DELETE OR UPDATE OF state ON job
        FOR EACH ROW EXECUTE FUNCTION chaos_job_audit()""",
    "DROP TRIGGER IF EXISTS chaos_memo_audit ON step_result",
    """CREATE TRIGGER chaos_memo_audit AFTER UPDATE OR DELETE ON step_result
        FOR EACH ROW EXECUTE FUNCTION chaos_memo_audit()""",
)
SELECT_JOBS = "SELECT id, state, payload, lease_owner, lease_until, next_run_at FROM job"
SELECT_TRANSITIONS = "SELECT job_id, from_state, to_state FROM chaos_transition ORDER BY seq"
SELECT_MEMOS = "SELECT job_id, step, output FROM step_result"
SELECT_MEMO_CHANGES = "SELECT job_id, step, what FROM chaos_memo_change ORDER BY seq"
SELECT_OUTBOX = "SELECT id, job_id, kind, sent_at FROM outbox ORDER BY id"


def is_postgres(db: str) -> bool:
    return db.startswith(("postgresql://", "postgres://"))


class PostgresReferenceAdapter(ReferenceAdapter):
    """The reference engine on a PostgreSQL database; ``db_path`` arguments are URLs."""

    name = "reference-postgresql"

    def make_store(self, db_path: str) -> PostgresStore:  # type: ignore[override]
        return PostgresStore(db_path)

    def create(self, db_path: str) -> None:
        """Create the engine's schema (if new) and install the audit tables and triggers."""
        store = self.make_store(db_path)
        try:
            with store.conn.transaction():
                for statement in AUDIT_SQL_PG:
                    store.conn.execute(statement)
        finally:
            store.close()

    def inspect(self, db_path: str) -> Snapshot:
        import psycopg

        with psycopg.connect(db_path, autocommit=True) as conn:
            # One snapshot for all five reads, so they agree with each other.
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
                snap = Snapshot()
                for r in conn.execute(SELECT_JOBS):
                    snap.jobs[r[0]] = JobView(r[1], r[2], r[3], r[4], r[5])
                snap.transitions = [tuple(r) for r in conn.execute(SELECT_TRANSITIONS)]  # type: ignore[misc]
                snap.memos = {(r[0], r[1]): r[2] for r in conn.execute(SELECT_MEMOS)}
                snap.memo_changes = [tuple(r) for r in conn.execute(SELECT_MEMO_CHANGES)]  # type: ignore[misc]
                snap.outbox = [OutboxView(*r) for r in conn.execute(SELECT_OUTBOX)]
        return snap

    def probe(self, db_path: str) -> Any:
        from ._services import PostgresProbe

        return PostgresProbe(db_path)


def adapter_for(db: str) -> ReferenceAdapter:
    """The reference adapter for a SQLite path, or its PostgreSQL twin for a ``postgresql://`` URL."""
    return PostgresReferenceAdapter() if is_postgres(db) else ReferenceAdapter()
