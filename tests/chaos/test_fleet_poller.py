"""The soak's progress poller survives its database going away: it reports the last counts,
connects again on the next poll, and the run goes on to a verdict."""

import psycopg

from chaos.fleet.fleet import ProgressPoller
from engine import PostgresStore


def test_the_poller_reconnects_after_the_server_terminated_its_backend(pg_url, clock):
    store = PostgresStore(pg_url)
    store.submit_many([("doc-1", {"source": "doc-1"}), ("doc-2", {"source": "doc-2"})], now=clock.now())
    poller = ProgressPoller(pg_url, 2, frozenset({"delivered"}))
    try:
        first = poller.poll()
        assert first.states == {"pending": 2}
        with psycopg.connect(pg_url, autocommit=True) as admin:  # a restart, as the poller sees it
            admin.execute("SELECT pg_terminate_backend(%s)", (poller.conn.info.backend_pid,))
        assert poller.poll() == first  # the last counts, not an exception
        assert poller.failures == 1
        assert "terminating connection" in poller.last_error
        assert poller.poll().states == {"pending": 2}  # connected again
    finally:
        poller.close()
        store.close()
