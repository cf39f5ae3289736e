"""The faults of the machine in the crash matrix: injected at every point where they can show, on
small families, and the unmodified engine holds under each; every kind reaches the report."""

from __future__ import annotations

import json

import pytest

from chaos import ReferenceAdapter, run_matrix
from chaos.cli import main
from chaos.core.libfiu import MISSING as LIBFIU_MISSING
from chaos.hostfaults.faults import KIND_OF, MACHINE_FAULTS

FAMILIES = ["clean", "backlog", "sender"]


def _violations(report):
    return [f"{r.id} [{r.fault}] {v}" for r in report.results for v in r.outcome.violations][:5]


def _faulted(report):
    return {r.fault for r in report.results if r.outcome.exit == "faulted"}


def test_the_engine_holds_under_a_full_disk_a_held_lock_clock_jumps_and_damaged_rows():
    report = run_matrix(ReferenceAdapter(), families=FAMILIES, faults=["disk", "lock", "clock", "damage"])
    assert report.violations == 0, _violations(report)
    kinds = [sub for kind in ("disk", "lock", "clock", "damage") for sub in MACHINE_FAULTS[kind]]
    assert set(report.by_fault()) == set(kinds)
    assert _faulted(report) == set(kinds), "a fault kind never showed"
    summary = report.to_json()
    assert summary["faults"] == ["disk", "lock", "clock", "damage"]
    assert set(summary["by_fault"]) == set(kinds)


def test_a_persons_action_on_a_damaged_row_is_refused_with_the_repair_to_make_and_changes_nothing():
    # A person cancelling a job whose payload was damaged meets DamagedRow (repair the row
    # first), a clear refusal like an illegal action's, not a crash of the tool.
    report = run_matrix(ReferenceAdapter(), families=["cancel-race"], faults=["damage"])
    assert report.violations == 0, _violations(report)
    assert "damage-payload" in _faulted(report)


def test_the_engine_holds_under_eio_and_enospc_injected_with_libfiu(libfiu):
    report = run_matrix(ReferenceAdapter(), families=["backlog", "sender"], faults=["io"])
    assert report.violations == 0, _violations(report)
    assert _faulted(report) == {"io-eio", "io-enospc"}


def test_a_machine_fault_is_replayed_by_its_sub_kind_alone(capsys):
    report = run_matrix(ReferenceAdapter(), families=["backlog"], faults=["clock"])
    skew = next(r for r in report.results if r.fault == "clock-skew" and r.outcome.exit == "faulted")
    assert "--faults clock-skew --point" in skew.replay
    args = skew.replay.split()[3:]
    assert main([a.strip("'") for a in args] + ["--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert [(r["id"], r["fault"]) for r in summary["results"]] == [(skew.id, "clock-skew")]


def test_the_machine_family_is_added_only_for_machine_faults_and_runs_only_them():
    report = run_matrix(ReferenceAdapter(), families=["backlog"], faults=["crash", "lock"])
    assert {r.fault for r in report.results} == {"lock-held"}
    with pytest.raises(ValueError, match="no scenario family matches"):
        run_matrix(ReferenceAdapter(), families=["backlog"], faults=["crash"])


def test_io_faults_without_libfiu_are_refused_with_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no fiu-run there: the matrix's own process (a fresh one) finds none either
    with pytest.raises(ValueError) as refused:
        run_matrix(ReferenceAdapter(), families=["clean"], faults=["io-eio"])
    assert str(refused.value) == LIBFIU_MISSING
    assert "apt-get install fiu-utils" in LIBFIU_MISSING


def test_every_sub_kind_names_its_kind_and_has_a_lesson():
    from chaos.hostfaults.faults import LESSONS

    assert set(LESSONS) == set(KIND_OF)
    assert all(lesson.endswith(".") for lesson in LESSONS.values())
