"""Random histories against PostgreSQL: the state machine gives each history a database of its
own (a copy of a template database made once per process), records a doomed iteration on a copy
of the live database, and drops them all afterwards.

A shortened ``ci`` exploration (fewer histories, same steps) keeps this well under a minute.
"""

from __future__ import annotations

import psycopg

from chaos.histories.state_machine import drop_templates
from chaos.adapters.postgres import PostgresReferenceAdapter
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



def test_a_held_lock_in_a_history_on_postgresql_makes_writes_back_off_and_a_heal_lets_them_through(pg_server):
    from chaos.histories.events import Heal, Human, Machine, Run, Submit
    from chaos.histories.state_machine import machine_for

    machine = machine_for(PostgresReferenceAdapter(pg_server.url()))()
    try:
        machine.start(1)
        lines = []
        for event in [Machine("lock-held"), Run("w1"), Submit("doc-2"), Human("cancel", "doc-1"), Heal(), Run("w1")]:
            machine._step(event)
            machine.every_invariant_holds_now()
            lines.append(machine.log[-1])
        assert lines[0].endswith("another connection holds the write lock")
        assert lines[1].endswith(": busy")
        assert "refused, the database unavailable" in lines[2] and "refused, the database unavailable" in lines[3]
        assert machine.adapter.inspect(machine.env.db).jobs.keys() == {"doc-1"}  # the refused submit left nothing
        assert lines[4].endswith("lock released") and lines[5].endswith(": done")
        machine._drain_and_check()
    finally:
        machine.ok = False
        machine.teardown()
        drop_templates()
