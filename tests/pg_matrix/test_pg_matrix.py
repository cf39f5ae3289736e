"""The crash matrix against PostgreSQL: killed children's transactions are rolled back by the
server, frozen ones do not hang the other worker, and planted bugs are caught as on SQLite.

Method: each family's template is a database (schema, audit and writer triggers, setup state);
each scenario gets ``CREATE DATABASE ... TEMPLATE`` of it and drops it afterwards. Sampled runs
keep the module well under a minute on two busy cores; without server binaries it skips (outside
CI) with the fixtures' one-line reason.
"""

from __future__ import annotations

import io
import json
import random
import shlex
from contextlib import redirect_stdout

import psycopg
import pytest

from chaos import run_matrix
from chaos.cli import main
from chaos.matrix.families import reference_scenarios
from chaos.adapters.postgres import PostgresReferenceAdapter
from chaos.core.freeze import run_pause
from chaos.core.prepare import prepare
from chaos.core.kill import run_point
from chaos.core.target import resolve
from chaos.core.template import discard
from chaos.core.world import World

from .variants import PLANTED


def _databases(server) -> set[str]:
    with psycopg.connect(server.url(), autocommit=True) as conn:
        return {r[0] for r in conn.execute("SELECT datname FROM pg_database WHERE datname LIKE 'fam%' OR datname LIKE 'scen%'")}


def test_a_sampled_crash_matrix_on_postgresql_holds_and_leaves_no_database(pg_server):
    adapter = PostgresReferenceAdapter(pg_server.url())
    report = run_matrix(adapter, mode="fork", families=["clean", "sender"], sample=60, jobs=2, faults=["crash"])
    assert report.points == 60
    assert report.violations == 0, [str(v) for r in report.results for v in r.outcome.violations][:5]
    assert {r.outcome.exit for r in report.results} == {"killed"}
    assert {r.family for r in report.results} == {"clean", "sender"}
    assert _databases(pg_server) == set()


def _family(adapter, name, workdir):
    scenario = next(s for s in reference_scenarios() if s.name == name)
    return prepare(adapter, scenario, workdir, seed=0)


@pytest.mark.parametrize("variant", PLANTED, ids=lambda v: v.__name__)
def test_a_planted_bug_re_expressed_on_postgresql_is_caught_by_the_same_invariant(pg_server, variant, tmp_path):
    """Killed at each hit of the planted line (the window the bug opens), the variant violates
    the invariant its SQLite twin does."""
    adapter = resolve(variant(pg_server.url()))  # the phases below the door take the resolved target
    workdir = str(tmp_path)
    family = _family(adapter, variant.families[0], workdir)
    try:
        window = [p for p in family.points if variant.bug_line in open(p.file).read().splitlines()[p.line - 1]]
        assert window, f"{variant.__name__}: the planted line was never reached"
        found = set()
        for point in window[:3]:
            outcome = run_point(adapter, family, point, workdir, seed=0, mode="fork")
            assert outcome.exit == "killed"
            found |= {v.invariant for v in outcome.violations}
    finally:
        discard(adapter, family)
    for invariant in variant.catches:
        assert invariant in found, f"{variant.__name__}: expected {invariant}, saw {sorted(found)}"


def test_a_sampled_pause_run_holds_and_a_frozen_lock_holder_is_resumed(pg_server, tmp_path):
    """Sampled pauses hold; at points where the frozen worker holds an open transaction (row
    locks), the other worker backs off within its lock timeout and the frozen one finishes."""
    adapter = PostgresReferenceAdapter(pg_server.url())
    report = run_matrix(adapter, mode="fork", families=["clean"], sample=16, jobs=2, faults=["pause"])
    assert report.violations == 0, [str(v) for r in report.results for v in r.outcome.violations][:5]
    assert {r.fault for r in report.results} == {"pause-live", "pause-expired"}

    workdir = str(tmp_path)
    adapter = resolve(adapter)  # the phases below the door take the resolved target
    family = _family(adapter, "clean", workdir)
    try:
        inside = [i for i, between in enumerate(family.between) if not between]
        assert inside, "psycopg's transaction status marks the points inside a transaction"
        for i in random.Random(0).sample(inside, 3):
            for expired in (False, True):
                outcome = run_pause(adapter, family, family.points[i], workdir, seed=0, expired=expired)
                assert outcome.exit == "paused"
                assert outcome.held, [str(v) for v in outcome.violations]
                assert outcome.blocked_s < 5
    finally:
        discard(adapter, family)
    assert _databases(pg_server) == set()


def test_writes_are_attributed_to_the_session_that_made_them(pg_url, tmp_path):
    adapter = PostgresReferenceAdapter()
    adapter.create(pg_url, attribute_writers=True)
    directory = str(tmp_path)
    from chaos.core.clock import SharedClock

    clock = SharedClock(1_700_000_000.0)
    world = World(directory, clock, lease_s=adapter.lease_s)
    session = adapter.open(pg_url, world, worker_id="w-1", clock=clock, rng=random.Random(0))
    try:
        session.submit("doc-1", {"source": "doc-1"})
        session.submit("doc-2", {"source": "doc-2"})
        session.run_once()
        session.cancel("doc-2")
    finally:
        session.close()
        world.close()
    writes = adapter.inspect(pg_url).writes
    adapter.release(pg_url)
    assert ("doc-1", "claim", "w-1", "1") in writes
    assert any(w[:3] == ("doc-1", "memo", "w-1") for w in writes)
    assert ("doc-2", "state", "human", "pending -> cancelled") in writes


def test_the_command_runs_the_matrix_on_a_given_server_and_replays_name_it(pg_server):
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["matrix", "--db", pg_server.url(), "--family", "sender", "--sample", "3", "--faults", "crash", "--json"])
    report = json.loads(out.getvalue())
    assert code == 0, report["violations"]
    assert report["target"] == "chaos:postgres_adapter" and report["points"] == 3
    assert all(r["replay"].endswith("--db " + shlex.quote(pg_server.url())) for r in report["results"])  # the URL names its password file: quoted


def test_a_sqlite_target_refuses_a_database_server(pg_server):
    with pytest.raises(ValueError, match="takes no --db"):
        run_matrix("chaos:reference_adapter", db=pg_server.url(), families=["clean"], sample=1)
