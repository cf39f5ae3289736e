"""Random histories against PostgreSQL: the state machine gives each history a database of its
own (a copy of a template database made once per process), records a doomed iteration on a copy
of the live database, and drops them all afterwards.

A shortened ``ci`` exploration (fewer histories, same steps) keeps this well under a minute.
"""

from __future__ import annotations

import psycopg

from chaos._histories import drop_templates
from chaos._pgadapter import PostgresReferenceAdapter
from chaos.machine import explore


def _databases(server) -> set[str]:
    with psycopg.connect(server.url(), autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'fam%' OR datname LIKE 'scen%' OR datname LIKE 'dry%'")}


def test_a_short_ci_exploration_on_postgresql_passes_and_leaves_no_database(pg_server):
    report = explore(PostgresReferenceAdapter(pg_server.url()), profile="ci", max_examples=12)
    assert report.passed, report.format()
    assert report.rules > 0 and report.examples >= 12
    drop_templates()
    assert _databases(pg_server) == set()

