"""Power cuts during a run of real worker processes, on a real ext4 image on a real loop device:
under synchronous=NORMAL the cuts take acknowledged commits and the invariants still hold once the
lost memos count as interruptions; under FULL (and PostgreSQL's synchronous_commit=on) nothing
acknowledged is lost. Each run is a few hundred jobs, a few seconds."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from chaos.hostfaults.power_runs import SETTINGS, power_run

JOBS = 200
SEEDS = 3
CUT_EVERY_S = 1.5  # longer than the runs' 1 s lease, so jobs claimed before a cut finish after it


def test_normal_loses_acknowledged_commits_to_power_cuts_and_every_invariant_still_holds(power):
    # A cut loses commits only where one came after the last checkpoint; on a busy machine a run
    # can end after a single cut that came at a quiet moment: up to SEEDS runs, each judged whole.
    for seed in range(SEEDS):
        run = power_run(SETTINGS["sqlite-normal"], jobs=JOBS, cut_every_s=CUT_EVERY_S, seed=seed)
        g = run.figures
        assert g["invariants_held"], g["violations"]
        assert run.result.ok
        assert g["cuts"] >= 1
        assert g["duplicates_applied"] == 0
        assert g["effects_applied"] == JOBS
        if g["commits_lost"] > 0:
            break
    # Nothing was fsynced since the last checkpoint: the cuts roll back the last commits ...
    assert g["commits_lost"] > 0, f"no run of {SEEDS} lost a commit: {g}"
    assert any(what.startswith("memo row") for cut in run.cuts for what in cut.lost)
    # ... whose steps are paid again and whose effects are sent again, applied once each.
    assert g["wasted_calls"] > 0


def test_full_loses_no_acknowledged_commit_to_power_cuts(power):
    run = power_run(SETTINGS["sqlite-full"], jobs=JOBS, cut_every_s=CUT_EVERY_S)
    g = run.figures
    assert g["invariants_held"], g["violations"]
    assert g["cuts"] >= 1
    assert g["commits_lost"] == 0, [cut.lost for cut in run.cuts]
    assert g["effects_applied"] == JOBS


def test_postgresql_with_synchronous_commit_on_loses_nothing_after_its_server_dies_with_the_power(power, pg_server):
    run = power_run(SETTINGS["postgresql-commit-on"], jobs=JOBS, cut_every_s=CUT_EVERY_S)
    g = run.figures
    assert g["invariants_held"], g["violations"]
    assert g["cuts"] >= 1
    assert g["commits_lost"] == 0, [cut.lost for cut in run.cuts]


def test_a_soak_with_power_cuts_prints_what_each_cut_took(power):
    done = subprocess.run(
        [sys.executable, "-m", "chaos", "soak", "--jobs", "150", "--workers", "2", "--lease", "1", "--power-every", "1.5",
         "--kill-every", "0", "--synchronous", "FULL", "--json"],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout)
    assert figures["setting"] == "SQLite, synchronous=FULL"
    assert figures["power_cuts"] >= 1
    assert figures["commits_lost"] == 0
    assert figures["headline"] == "0/0/0/0"


@pytest.mark.parametrize(("flags", "message"), [
    (["--power-every", "2"], "is not longer than the lease (3 s)"),
    (["--synchronous", "FULL"], "--synchronous is the setting under power cuts: pass --power-every too"),
    (["--power-every", "5", "--synchronous", "sometimes"], "--synchronous sometimes: on sqlite choose one of OFF, NORMAL, FULL"),
    (["--power-every", "5", "--db", "x.db"], "leave out --db"),
])
def test_bad_power_flags_exit_2_naming_the_flag_and_the_fix(flags, message):
    done = subprocess.run([sys.executable, "-m", "chaos", "soak", *flags], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
