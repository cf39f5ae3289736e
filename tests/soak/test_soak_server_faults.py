"""The PostgreSQL soak tells the truth when the server itself fails under it.

Goal: a soak whose server has every backend terminated (``pg_terminate_backend``) or is
restarted as a crash would (``pg_ctl restart -m immediate``) while workers and the sender run
either delivers every job with every invariant held, or fails naming the cause; it never passes
with jobs that its own harness failed. Method: a short soak through the soak's own trial, with the
fault injected once a fifth of the jobs has settled, on a throwaway server of this module's own (a
restart would cut the other tests' sessions), each soak in a database of its own on it; and a
harness error planted in the call ledger of an otherwise clean run, which must turn its verdict
into a failure that says so.
"""

from __future__ import annotations

import json

import pytest

from chaos.fleet.fleet import FleetConfig
from chaos.fleet.services import CallLedger, HARNESS_ERROR_PREFIX, LedgerModel, PostgresProbe
from chaos.fleet.soak import format_soak, soak_figures
from chaos.fleet.trial import Trial
from engine import ConnectionFailed, SystemClock
from engine.pgserver import ServerUnavailable, TemporaryPostgres

from pg_fixtures import require

psycopg = pytest.importorskip("psycopg", reason="psycopg is not installed (pip install -e '.[postgres]')")

JOBS = 150
SOAK_DATABASE = "soak"
TERMINATE_ALL = ("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                 "WHERE datname = %s AND pid <> pg_backend_pid() AND backend_type = 'client backend'")


@pytest.fixture(scope="module")
def server():
    """One server for this module's soaks (each xdist worker that runs one starts its own): a fault
    test leaves it running, a restarted server recovered, and its soak's database is dropped."""
    try:
        s = TemporaryPostgres()
        s.start()
    except ServerUnavailable as exc:
        require(f"PostgreSQL unavailable: {exc}")
    try:
        yield s
    finally:
        s.stop()


def _soak_with_fault(server, tmp_path, fault):
    """A soak of JOBS jobs with kills; ``fault(server)`` runs once, when a fifth of them settled."""
    server.drop_database(SOAK_DATABASE)  # a soak before this one on the module's server left its own
    db = server.create_database(SOAK_DATABASE)
    landed: list = []

    def on_progress(progress, run):
        if not landed and progress.settled >= JOBS // 5:
            landed.append(fault(server))

    config = FleetConfig(db=db, directory=str(tmp_path / "run"), workers=3, kill_every_s=0.2, kills_min=5, seed=0, timeout_s=300)
    result = Trial(config, JOBS).run(on_progress)
    figures = soak_figures(result, backend="postgresql")
    return result, figures, format_soak(result, figures), landed


def _assert_truthful(result, figures, report):
    """Either every job delivered with every invariant held, or a failure that names its cause."""
    if result.ok:
        assert figures["states"] == {"delivered": JOBS}, report
        assert figures["harness_errors"] == 0 and figures["failed_by_harness"] == 0, report
        assert report.endswith("OK")
    else:
        assert report.splitlines()[-1].startswith("FAILED"), report
        assert any(marker in report for marker in ("VIOLATION", "HARNESS FAILED", "PROCESS DIED", "NOT DRAINED", "TOO FEW KILLS")), report


def _terminate_all(server) -> int:
    with psycopg.connect(server.url(), autocommit=True) as admin:
        return admin.execute(TERMINATE_ALL, (SOAK_DATABASE,)).fetchone()[0]


def _crash_restart(server) -> bool:
    server.crash_restart()
    return True


def test_a_soak_whose_backends_are_all_terminated_delivers_every_job_and_says_so(server, tmp_path):
    result, figures, report, landed = _soak_with_fault(server, tmp_path, _terminate_all)
    # Which sessions exist at that moment depends on the kills (a process just restarted has not
    # connected yet): at least one was cut.
    assert landed and landed[0] >= 1, f"the fault did not land: {landed}"
    _assert_truthful(result, figures, report)
    # The harness rides out the fault as the engine does: nothing is left failed by its probe.
    assert result.ok, report + "\n" + json.dumps(figures["states"])


def test_a_soak_whose_server_crashes_and_restarts_delivers_every_job_and_says_so(server, tmp_path):
    result, figures, report, landed = _soak_with_fault(server, tmp_path, _crash_restart)
    assert landed == [True]
    _assert_truthful(result, figures, report)
    # Processes restarted while the server recovered waited for it instead of dying at once.
    assert figures["unexpected_exits"] == 0, report
    assert result.ok, report


def test_a_model_call_the_probe_cannot_make_is_retried_and_recorded_as_the_harnesss_failure(tmp_path):
    ledger = CallLedger(str(tmp_path / "calls.db"))
    probe = PostgresProbe("postgresql://nobody@127.0.0.1:1/none?connect_timeout=1", wait_s=0.2)
    model = LedgerModel(ledger, probe, latency_ms=(0.0, 0.0), rng=__import__("random").Random(0), clock=SystemClock())
    ctx = type("Ctx", (), {"job_id": "doc-1", "step": "extract", "worker_id": "w1.0", "token": 1})()
    with pytest.raises(ConnectionFailed, match=HARNESS_ERROR_PREFIX):  # retryable: the engine tries the step again
        model.complete(ctx, "extract", "text")
    assert ledger.calls() == []  # nothing was paid
    assert [(w, j, s) for w, j, s, _at, _error in ledger.harness_errors()] == [("w1.0", "doc-1", "extract")]


def test_a_run_with_a_harness_error_is_a_failure_that_says_so_even_when_every_invariant_held(tmp_path):
    config = FleetConfig(db=str(tmp_path / "soak.db"), directory=str(tmp_path / "run"), workers=1, kill_every_s=0.0, seed=0, timeout_s=120)
    (tmp_path / "run").mkdir()
    planted = CallLedger(config.calls_path)
    ctx = type("Ctx", (), {"job_id": "doc-00001", "step": "extract", "worker_id": "w1.0", "token": 1})()
    planted.harness_error(ctx, 0.0, "OperationalError: the database system is starting up")
    planted.close()
    result = Trial(config, 5, drop_every=0, fail_every=0).run()
    figures = soak_figures(result, backend="sqlite")
    report = format_soak(result, figures)
    assert figures["headline"] == "0/0/0/0" and set(figures["violations"].values()) == {0}
    assert figures["harness_errors"] == 1
    assert not result.ok
    assert "HARNESS FAILED: the model probe could not read the database 1 times" in report
    assert "the database system is starting up" in report
    assert report.splitlines()[-1].startswith("FAILED")
