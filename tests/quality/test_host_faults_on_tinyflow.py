"""The host's faults on an engine with a schema of its own (tinyflow, ``examples/minimal_engine``):
the harness finds its rows through the adapter's declared :class:`~chaos.adapters.sql.SqlSchema`
and its ``inspect``, never through the reference's tables, and reports tinyflow's real weaknesses
under each fault, and nothing else; the reference engine holds in the same families.

tinyflow has no fencing token (a worker whose clock is behind writes over the worker that took
its job: **fenced-writes** under ``clock-skew``), lets any database error other than "locked" out
of its loop (the worker dies on a full disk: **worker-survives**) and parses what it reads without
quarantining a row it cannot parse (a damaged payload or state kills the worker on every restart
and the job is not parked in time: **worker-survives**, **quarantined**, and for a state not in
the table **drains**). A held lock and a clock that jumps (while its lease
is respected) it survives.
"""

from __future__ import annotations

import pytest

from chaos import ReferenceAdapter, run_matrix
from chaos.adapter import capabilities
from chaos.cli import main

FAULTS = ["disk", "lock", "clock", "damage"]
EXPECTED = {
    "disk-full": {"worker-survives"},
    "damage-payload": {"worker-survives", "quarantined"},
    # tinyflow parks the job in "failed" at last, a state with no way out: a quarantine, not an illegal move
    "damage-state": {"worker-survives", "quarantined", "drains"},
    "clock-skew": {"fenced-writes"},
}


@pytest.fixture
def tinyflow(minimal_engine_path):
    import crash

    return crash.adapter()


def _found(report) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for r in report.results:
        for v in r.outcome.violations:
            out.setdefault(r.fault, set()).add(v.invariant)
    return out


def test_tinyflow_under_the_hosts_faults_shows_its_real_weaknesses_and_nothing_else(tinyflow):
    report = run_matrix(tinyflow, families=["backlog"], faults=FAULTS, jobs=2)
    assert not report.baselines["backlog"].violations
    assert _found(report) == EXPECTED
    faulted = {r.fault for r in report.results if r.outcome.exit == "faulted"}
    assert {"lock-held", "clock-back", "clock-forward"} <= faulted  # they showed, and tinyflow held
    # A damaged memo row is only read where a step's memo is read again: tinyflow reads them once
    # per claim, so the worker, frozen after that read, finishes from what it read ("no-effect").
    assert "damage-memo" in set(report.by_fault())


def test_the_reference_engine_holds_in_the_same_family_and_in_a_paced_storm():
    # The storm's drain after the fault is paced as after a crash: its retries are spread by the
    # engine's jitter, not bunched by the harness's clock.
    report = run_matrix(ReferenceAdapter(), families=["backlog", "retry-storm"], faults=FAULTS, jobs=2)
    assert report.violations == 0, sorted({(r.fault, v.invariant) for r in report.results for v in r.outcome.violations})


class _Without:
    """An adapter with some of its attributes hidden: the harness sees an adapter without them."""

    def __init__(self, inner, *hidden):
        self._inner, self._hidden = inner, hidden

    def __getattr__(self, name):
        if name in ("_inner", "_hidden") or name in self._hidden:  # the former: not set yet while it is unpickled
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_an_adapter_without_a_schema_is_refused_the_damage_faults_naming_the_fix(tinyflow, capsys):
    with pytest.raises(ValueError, match=r"declares no schema, which damage-payload, damage-state, damage-memo needs.*"
                                         r"schema = chaos.adapters.sql.SqlSchema\(...\).*or leave damage out of --faults"):
        run_matrix(_Without(tinyflow, "schema"), families=["backlog"], faults=["damage"])
    assert main(["matrix", "--target", "quality.test_host_faults_on_tinyflow:bare", "--faults", "clock,damage"]) == 2
    err = capsys.readouterr().err
    assert "declares no schema" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def bare():
    """The CLI's target: tinyflow without its schema."""
    import crash

    return _Without(crash.adapter(), "schema")


class _Plain(_Without):
    """tinyflow's adapter without the optional probe and writer attribution: only the required
    contract and the schema."""

    def __init__(self, inner):
        super().__init__(inner, "probe")

    def create(self, db_path):
        self._inner.create(db_path)


def test_an_adapter_without_the_optional_probe_and_writer_attribution_is_gated_all_the_same(tinyflow):
    # Both are optional (chaos.adapter.CAPABILITIES): without a probe calls are not classified,
    # without the attribution no fenced-writes; crashes and the host's faults run as before.
    plain = _Plain(tinyflow)
    lines = {s.name: s for s in capabilities(plain)}
    assert not lines["probe"].present and not lines["writer_attribution"].present
    report = run_matrix(plain, families=["clean", "backlog"], faults=["crash", "disk"])
    assert not [r.id for r in report.results if r.outcome.exit == "error"]
    assert {r.fault for r in report.results} == {"crash", "disk-full"}
    assert _found(report) == {"disk-full": {"worker-survives"}}
