"""The soak on both backends: processes SIGKILLed at random until every job settles, then 0/0/0/0.

Goal: the same guarantees on SQLite and on PostgreSQL under a violent kill rate, judged from the
audit triggers and the ledgers, never from a worker's memory. Method: short soaks (a kill every
0.2 s on average, at least 5 kills) through the command's own code path, the PostgreSQL audit
trigger checked against the SQLite one on the same history, and the throughput rows.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from chaos import ReferenceAdapter
from chaos.adapters.postgres import PostgresReferenceAdapter
from chaos.fleet.soak import parser, run_soak, throughput_rows
from disk_fixtures import fill, mounted_tmpfs
from engine import FakeClock, GeneratedDocuments, LocalModel, Worker, reference_workflow

SHORT = ["--workers", "3", "--jobs", "150", "--kill-every", "0.2", "--kills-min", "5", "--json"]


def _soak(argv: list[str]) -> tuple[int, dict]:
    out = io.StringIO()
    code = run_soak(parser().parse_args(argv), out=out)
    return code, json.loads(out.getvalue())


def _assert_clean(code: int, figures: dict, backend: str) -> None:
    assert code == 0, json.dumps(figures, indent=1)  # every figure, not pytest's shortened repr
    assert figures["backend"] == backend
    assert figures["headline"] == "0/0/0/0"
    assert figures["kills"] >= 5
    assert figures["states"] == {"delivered": 150}
    assert figures["receiver"]["applied"] == 150
    assert figures["receiver"]["requests"] >= 153  # 3 replies dropped on purpose: those keys arrived twice
    assert figures["jobs_per_s"] > 0
    assert set(figures["violations"].values()) == {0}
    assert figures["drained"] and figures["unexpected_exits"] == 0


def test_a_short_soak_on_sqlite_loses_nothing_and_pays_for_nothing_twice(tmp_path):
    code, figures = _soak([*SHORT, "--backend", "sqlite", "--db", str(tmp_path / "soak.db")])
    _assert_clean(code, figures, "sqlite")


def test_a_short_soak_on_postgresql_loses_nothing_and_pays_for_nothing_twice(pg_url):
    code, figures = _soak([*SHORT, "--backend", "postgresql", "--db", pg_url])
    _assert_clean(code, figures, "postgresql")


def test_a_postgresql_soak_without_a_url_starts_and_removes_its_own_server(pg_server, capsys):
    # pg_server only gives this test the fixtures' skip-or-fail rule: the soak starts a server of its own.
    code, figures = _soak(["--backend", "postgresql", "--workers", "2", "--jobs", "20", "--kill-every", "0", "--json"])
    assert code == 0, figures
    assert figures["headline"] == "0/0/0/0"


@pytest.mark.parametrize("argv, message", [
    (["--timeout", "nan"], "--timeout nan: pass a finite number of seconds > 0"),
    (["--timeout", "-1"], "--timeout -1: pass a finite number of seconds > 0"),
    (["--power-every", "nan"], "--power-every nan: pass a finite number of seconds (0: no power cuts)"),
    (["--lease", "nan"], "--lease nan: pass a number of seconds > 0 and at most 604800 (a week)"),
    (["--db", "sqlite:///y.db"], "--db 'sqlite:///y.db': pass the path of a new SQLite file"),
    (["--db", "/proc/x.db"], "--db /proc/x.db: no file can be made in /proc"),
])
def test_the_soak_refuses_a_setting_it_cannot_honour_before_any_process_starts(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert run_soak(parser().parse_args(["--jobs", "3", "--workers", "1", *argv])) == 2
    assert capsys.readouterr().err.startswith(f"error: {message}")
    assert list(tmp_path.iterdir()) == []  # no stray folder (sqlite:/ once), no file


def test_the_soak_on_a_postgresql_server_that_cannot_be_reached_is_one_error_without_its_password(capsys):
    argv = ["--backend", "postgresql", "--db", "postgresql://nobody:secret@127.0.0.1:1/db", "--jobs", "3", "--workers", "1"]
    assert run_soak(parser().parse_args(argv)) == 2
    err = capsys.readouterr().err
    assert "error: cannot connect to 'postgresql://nobody:***@127.0.0.1:1/db'" in err and "secret" not in err and "Traceback" not in err


def test_the_soak_on_a_closed_port_says_so_on_one_line():
    """libpq's message ends with a line break and a tab before its hint: it printed on two lines."""
    pytest.importorskip("psycopg")
    out = subprocess.run([sys.executable, "-m", "chaos", "soak", "--backend", "postgresql", "--db", "postgresql://u:secret@127.0.0.1:1/x",
                          "--jobs", "3", "--workers", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "port 1 failed: Connection refused Is the server running" in lines[0] and "secret" not in lines[0], lines[0]


def test_the_soak_refuses_a_database_of_the_other_backend(capsys):
    assert run_soak(parser().parse_args(["--backend", "sqlite", "--db", "postgresql://u@127.0.0.1/x"])) == 2
    assert "does not match --backend sqlite" in capsys.readouterr().err


def test_the_soak_names_a_database_of_the_other_backend_without_its_password(capsys):
    argv = ["--backend", "sqlite", "--db", "postgresql://u:s3cret@127.0.0.1/x?password=pa55word2"]
    assert run_soak(parser().parse_args(argv)) == 2
    err = capsys.readouterr().err
    assert "--db 'postgresql://u:***@127.0.0.1/x?password=***' does not match --backend sqlite" in err
    assert "s3cret" not in err and "pa55word2" not in err


@pytest.mark.parametrize("command", ["soak", "demo"])
def test_a_soak_on_a_full_disk_is_one_line_leaves_nothing_and_can_be_run_again(command, tmp_path):
    """It was a 41-line traceback, and the ``<db>-chaos`` folder it left made the rerun refuse to start."""
    with mounted_tmpfs(tmp_path / "full", "2m") as folder:
        fill(folder)
        db = str(folder / "s.db")
        for attempt in (1, 2):
            out = subprocess.run([sys.executable, "-m", "chaos", command, "--db", db, "--jobs", "5", "--workers", "1"],
                                 capture_output=True, text=True, timeout=120)
            assert out.returncode == 2, (attempt, out.stdout, out.stderr)
            assert "Traceback" not in out.stderr
            lines = out.stderr.strip().splitlines()
            assert len(lines) == 1, out.stderr
            assert db in lines[0] and "disk is full" in lines[0] and "free disk space" in lines[0], lines[0]
            assert sorted(p.name for p in folder.iterdir()) == ["fill"]


def _history(adapter, db: str) -> tuple[list, list]:
    """Submit, run one job through, tamper with a memo row: what the audit recorded."""
    adapter.create(db)
    store = adapter.make_store(db)
    try:
        store.submit("doc-1", {"source": "doc-1"}, now=0.0)
        Worker(store, reference_workflow(LocalModel(), GeneratedDocuments()), clock=FakeClock(0.0), threaded=False).run_once()
        store.conn.execute("UPDATE step_result SET output = '{}' WHERE step = 'fetch'")
        store.conn.execute("DELETE FROM step_result WHERE step = 'verify'")
    finally:
        store.close()
    snap = adapter.inspect(db)
    return snap.transitions, snap.memo_changes


def test_the_postgresql_audit_trigger_records_the_same_history_as_the_sqlite_one(pg_url, tmp_path):
    pg = _history(PostgresReferenceAdapter(), pg_url)
    lite = _history(ReferenceAdapter(), str(tmp_path / "audit.db"))
    assert pg == lite
    transitions, memo_changes = pg
    assert transitions[:3] == [("doc-1", None, "pending"), ("doc-1", "pending", "fetching"), ("doc-1", "fetching", "fetched")]
    assert transitions[-1] == ("doc-1", "delivering", "delivered")
    assert memo_changes == [("doc-1", "fetch", "updated"), ("doc-1", "verify", "deleted")]


def test_throughput_rows_give_jobs_per_second_for_1_2_and_4_workers():
    rows = throughput_rows(quick=True, backends=["sqlite"])
    assert [r["key"] for r in rows] == ["soak.sqlite.1w", "soak.sqlite.2w", "soak.sqlite.4w"]
    for row in rows:
        assert row["unit"] == "jobs/s"
        assert row["value"] > 0
        assert "invariants held" in row["note"]
