"""The benchmark command runs end to end at tiny sizes and reports every figure in a stable shape.

These are smoke and shape tests: they never assert a speed, so a slow or busy machine cannot fail
them. What they do assert is what a script comparing two runs relies on: the keys, the units, the
skip reasons, and the number of commits per job (a property of the engine, not of the machine).
"""

from __future__ import annotations

import doctest
import importlib
import json
import subprocess
import sys
import types

import pytest

from benchmarks import Sizes, _run, harness_rows
from benchmarks._harness import SKIPPED

QUICK_TIMEOUT_S = 300  # generous: CI machines are shared; the quick run normally takes seconds

LIMIT_KEYS = ("limit.cas.normal", "limit.cas.full", "limit.cas.normal.engine_pages", "limit.engine_sql.normal")
CRASHGATE_KEYS = tuple(
    f"crashgate.{w}w.{mode}.{sync}" for sync in ("normal", "full") for w in (1, 2) for mode in ("inline", "threaded")
)
SCALING_KEYS = (
    "scaling.claim_us.backlog_small",
    "scaling.claim_us.backlog_large",
    "scaling.claim_us.finished",
    "scaling.jobs.backlog_small",
    "scaling.jobs.backlog_large",
    "scaling.jobs.finished",
    "ratio.scaling.backlog_large",
    "ratio.scaling.finished",
    "scaling.worker_rss_mib",
)
PEER_KEYS = ("peers.dbos", "peers.huey.chained", "peers.huey.one_step", "peers.persistqueue", "peers.litequeue")


def _run_quick(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", *flags],
        capture_output=True,
        text=True,
        timeout=QUICK_TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def quick_json() -> dict:
    done = _run_quick("--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_quick_json_has_a_key_per_row_with_a_value_and_its_unit(quick_json):
    for key in LIMIT_KEYS + CRASHGATE_KEYS + SCALING_KEYS:
        row = quick_json[key]
        assert isinstance(row["value"], (int, float)), key
        assert row["value"] > 0, key
        assert row["unit"], key
    assert quick_json["limit.cas.normal"]["unit"] == "commits/s"
    assert quick_json["crashgate.1w.inline.normal"]["unit"] == "jobs/s"
    assert quick_json["ratio.scaling.backlog_large"]["unit"] == "x"
    assert quick_json["meta"]["quick"] is True


def test_the_engine_share_of_the_limit_is_split_into_its_sql_and_its_python(quick_json):
    limit, floor = quick_json["limit.cas.normal"]["value"], quick_json["limit.engine_sql.normal"]["value"]
    assert quick_json["limit.engine_sql.normal"]["unit"] == "commits/s"
    for key in ("ratio.commits_vs_limit.normal", "ratio.engine_sql_vs_limit.normal", "ratio.engine_sql.normal"):
        assert quick_json[key]["unit"] == "x" and quick_json[key]["value"] > 0, key
    # The three are taken from the same runs: the engine's share of the limit is, run by run, its
    # share of its statements' own rate times theirs of the limit (medians of per-run pairs, so
    # equal only up to which run is the median; the quick run's one run makes them equal, up to the
    # JSON's rounding to three decimals).
    share = quick_json["ratio.engine_sql.normal"]["value"] * quick_json["ratio.engine_sql_vs_limit.normal"]["value"]
    assert share == pytest.approx(quick_json["ratio.commits_vs_limit.normal"]["value"], abs=0.002)
    assert floor / limit == pytest.approx(quick_json["ratio.engine_sql_vs_limit.normal"]["value"], abs=0.002)


def test_the_engine_share_is_also_taken_against_the_raw_cas_on_pages_of_the_engines_size(quick_json):
    """The engine creates its files with 1 KiB pages, which make every commit cheaper, the raw
    CAS's too: the share is quoted against both limits, from the same engine runs."""
    engine_commits = quick_json["ratio.commits_vs_limit.normal"]["value"] * quick_json["limit.cas.normal"]["value"]
    same_pages = quick_json["limit.cas.normal.engine_pages"]["value"]
    assert quick_json["ratio.engine_pages.normal"]["value"] == pytest.approx(engine_commits / same_pages, rel=0.02)


def test_every_peer_is_measured_or_skipped_with_a_one_line_reason(quick_json):
    for key in PEER_KEYS:
        row = quick_json[key]
        if "skipped" in row:
            assert row["skipped"] and "\n" not in row["skipped"], key
        else:
            assert row["value"] > 0, key
            ratio_key = "ratio.crashgate_vs_" + key.removeprefix("peers.")
            assert quick_json[ratio_key]["unit"] == "x"


def test_crashgate_rows_report_overhead_per_step_and_about_five_commits_per_job(quick_json):
    for key in CRASHGATE_KEYS:
        row = quick_json[key]
        assert "us_per_step" in row, key
        # 1 claim + 4 step completions per job, plus the submit and outbox batches spread over the jobs.
        assert 5.0 <= row["commits_per_job"] < 6.0, (key, row["commits_per_job"])


def test_the_plugin_start_up_cost_is_a_same_run_ratio_of_collecting_an_empty_project(quick_json):
    with_plugin = quick_json["startup.collect.with_plugin"]
    without = quick_json["startup.collect.without_plugin"]
    assert with_plugin["unit"] == without["unit"] == "ms"
    assert with_plugin["value"] > 0 and without["value"] > 0
    row = quick_json["ratio.startup.plugin"]
    assert row["unit"] == "x"
    # A plugin that imported the harness at start-up would cost several times an empty collection's
    # imports; this bound is loose because the quick run is one noisy pair on a shared machine.
    assert 0.5 < row["value"] < 2.0, row


def test_the_table_is_printed_with_the_harness_line_when_chaos_bench_is_missing():
    done = _run_quick("--no-peers")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("crashgate benchmarks:")
    assert lines[1].split()[:3] == ["benchmark", "value", "unit"]
    assert any(line.startswith("limit: raw sqlite3 CAS commit") for line in lines)
    if importlib.util.find_spec("chaos.matrix.bench") is None:
        assert SKIPPED in lines
    assert not any("DBOS" in line for line in lines)  # --no-peers


def test_a_missing_peer_is_skipped_with_the_install_command(monkeypatch):
    monkeypatch.setattr(_run.importlib.util, "find_spec", lambda name: None)
    rows = _run._peer_rows("/nonexistent", Sizes.for_mode(quick=True), lambda line: None)
    assert [row.key for row in rows] == list(PEER_KEYS)
    for row in rows:
        assert row.skipped is not None
        assert "pip install -e '.[bench]'" in row.skipped
        assert row.to_json()["skipped"] == row.skipped


def test_the_harness_hook_says_skipped_in_one_line_without_chaos_bench():
    rows, message = harness_rows(quick=True, importer=lambda name: None)
    assert rows == []
    assert message == "harness: skipped (chaos.matrix.bench not available)"


def test_the_harness_hook_includes_the_rows_chaos_bench_returns():
    seen = []

    def rows(quick):
        seen.append(quick)
        return [{"key": "fork_scenarios_per_s", "label": "fork-mode crash scenarios", "value": 12.5, "unit": "scenarios/s"}]

    fake = types.SimpleNamespace(rows=rows)
    got, message = harness_rows(quick=True, importer=lambda name: fake if name == "chaos.matrix.bench" else None)
    assert message is None
    assert seen == [True]
    assert [(r.key, r.label, r.value, r.unit) for r in got] == [
        ("harness.fork_scenarios_per_s", "fork-mode crash scenarios", 12.5, "scenarios/s")
    ]


def test_a_failing_harness_hook_is_reported_in_one_line_not_raised():
    def rows(quick):
        raise RuntimeError("matrix not built")

    got, message = harness_rows(quick=True, importer=lambda name: types.SimpleNamespace(rows=rows))
    assert got == []
    assert message == "harness: failed (RuntimeError: matrix not built)"


@pytest.mark.parametrize(
    "module",
    ["_measure", "_limit", "_steps", "_crashgate", "_scaling", "_isolated", "_harness", "_table"],
)
def test_the_module_examples_run(module):
    result = doctest.testmod(importlib.import_module(f"benchmarks.{module}"))
    assert result.failed == 0


POWER_SETTINGS = ("sqlite-off", "sqlite-normal", "sqlite-full", "postgresql-commit-off", "postgresql-commit-on")
POWER_FIGURES = ("commits_lost_per_cut", "wasted_calls", "effects_resent", "commits_per_s")


def test_every_power_setting_has_its_four_figures_measured_or_skipped_with_a_one_line_reason(quick_json):
    for setting in POWER_SETTINGS:
        for figure in POWER_FIGURES:
            row = quick_json[f"power.{setting}.{figure}"]
            if "skipped" in row:
                assert row["skipped"] and "\n" not in row["skipped"], (setting, figure)
            else:
                assert isinstance(row["value"], (int, float)), (setting, figure)
    if "skipped" not in quick_json["power.sqlite-full.commits_lost_per_cut"]:
        # FULL promises that no acknowledged commit is lost; --quick measures it for real.
        assert quick_json["power.sqlite-full.commits_lost_per_cut"]["value"] == 0
        assert quick_json["power.sqlite-full.commits_per_s"]["value"] > 0


def test_what_watching_a_scenario_costs_is_a_same_run_ratio(quick_json):
    # The audit hook and the raise tracer of every scenario's worker, measured against the same
    # matrix run with both off, alternately, in one benchmark run (the figure, not a limit).
    row = quick_json["harness.watch_overhead_ratio"]
    assert row["unit"] == "x" and row["value"] > 0
    assert "watched" in row["note"] and "not" in row["note"]
