"""PostgreSQL: a connection lost at COMMIT leaves the commit's outcome unknown, and the error says
so (never "nothing of it was written"); a submit is then safe to repeat, as ids are idempotent."""

import psycopg
import pytest

from engine import CommitUnknown, PostgresStore, StoreFailed

# A deferred constraint trigger runs inside COMMIT: terminating its own backend there is a
# connection that drops while the server commits, as a restart or a network cut at that moment.
DROP_AT_COMMIT = (
    """CREATE FUNCTION drop_at_commit() RETURNS trigger LANGUAGE plpgsql AS $$
       BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); PERFORM pg_sleep(1); RETURN NULL; END $$""",
    """CREATE CONSTRAINT TRIGGER drop_at_commit AFTER INSERT ON job DEFERRABLE INITIALLY DEFERRED
       FOR EACH ROW WHEN (NEW.id LIKE 'cut-%') EXECUTE FUNCTION drop_at_commit()""",
)


@pytest.fixture
def store(pg_url):
    store = PostgresStore(pg_url)
    with psycopg.connect(pg_url, autocommit=True) as admin:
        for statement in DROP_AT_COMMIT:
            admin.execute(statement)
    yield store
    store.close()


def test_a_connection_lost_at_commit_is_reported_as_an_unknown_outcome(store, clock):
    with pytest.raises(StoreFailed) as raised:
        store.submit("cut-1", {"source": "cut-1"}, now=clock.now())
    assert isinstance(raised.value, CommitUnknown)
    message = str(raised.value)
    assert "nothing of it was written" not in message
    assert "unknown" in message and "may have been written" in message
    assert "submit it again" in message  # the fix: ids are idempotency keys


def test_a_connection_lost_before_commit_still_says_nothing_was_written(store, clock, pg_url):
    store.submit("doc-1", {"source": "doc-1"}, now=clock.now())
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (store.conn.info.backend_pid,))
    with pytest.raises(StoreFailed) as raised:
        store.submit("doc-2", {"source": "doc-2"}, now=clock.now())
    assert not isinstance(raised.value, CommitUnknown)
    assert "nothing of it was written" in str(raised.value)
    assert [j.id for j in store.jobs()] == ["doc-1"]  # reconnected on the next use
