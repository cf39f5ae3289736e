"""SQLite-only settings, URL dispatch and the command line (exit 2 with one clear line on operating errors).

The schema-refusal tests run on both backends in tests/contract/test_schema.py."""

import subprocess
import sys

import pytest

from engine import InvalidInput, SqliteStore, open_store


def test_wal_and_the_synchronous_level_are_set(db_path):
    store = SqliteStore(db_path, synchronous="FULL")
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    with pytest.raises(InvalidInput, match="synchronous='FAST'"):
        SqliteStore(db_path, synchronous="FAST")


def test_open_store_refuses_an_unknown_url_scheme(tmp_path):
    with pytest.raises(InvalidInput, match="scheme 'mysql'"):
        open_store("mysql://localhost/db")
    assert open_store(f"sqlite:///{tmp_path}/a.db").path == f"{tmp_path}/a.db"


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *args], capture_output=True, text=True)


def test_cli_human_commands_report_illegal_actions_with_exit_2(tmp_path):
    db = str(tmp_path / "e.db")
    assert run_cli("submit", "--db", db, "doc-1", '{"source": "doc-1"}').stdout.strip() == "doc-1: pending"
    out = run_cli("requeue", "--db", db, "doc-1")
    assert out.returncode == 2
    assert "requeue needs one of: failed_deliver, failed_extract, failed_fetch" in out.stderr
    assert run_cli("cancel", "--db", db, "doc-1").stdout.strip() == "doc-1: cancelled"
    out = run_cli("submit", "--db", db, "doc-1", '{"source": "other"}')
    assert out.returncode == 2 and "different payload" in out.stderr
    out = run_cli("submit", "--db", db, "doc-2", "{not json")
    assert out.returncode == 2 and "is not JSON" in out.stderr


def test_cli_work_then_replay_shows_no_difference(tmp_path):
    db = str(tmp_path / "e.db")
    run_cli("submit", "--db", db, "doc-1", '{"source": "doc-1"}')
    assert '"done": 1' in run_cli("work", "--db", db).stdout
    out = run_cli("replay", "--db", db, "doc-1", "extract")
    assert out.returncode == 0, out.stderr
    assert "same output as stored" in out.stdout
    out = run_cli("replay", "--db", db, "doc-1", "summarise")
    assert out.returncode == 2 and "no step 'summarise'" in out.stderr


def test_status_cli_prints_the_four_sections(tmp_path):
    db = str(tmp_path / "ex.db")
    out = subprocess.run([sys.executable, "-m", "engine", "example", "--db", db, "--jobs", "5"], capture_output=True, text=True, check=True)
    assert "5 effects delivered" in out.stdout
    out = subprocess.run([sys.executable, "-m", "engine", "status", "--db", db], capture_output=True, text=True, check=True)
    for section in ("where is everything", "what is stuck", "what is failing", "which step costs the money", "oldest job"):
        assert section in out.stdout


def test_status_json_stays_json_when_step_costs_add_up_past_the_largest_float(tmp_path):
    """Each cost is finite when stored (6e306 dollars a call here), but their sum became infinity,
    which json.dumps wrote as Infinity: no JSON reader accepts it. Such a total is null, and the
    text report says what to check."""
    import json
    import random
    import time

    from engine import FakeClock, GeneratedDocuments, LocalModel, Outcome, Worker, reference_workflow

    db = str(tmp_path / "e.db")
    store = SqliteStore(db)
    now = time.time()  # status looks at the last 24 hours of the real clock
    store.submit_many([(f"doc-{n}", {"source": f"doc-{n}"}) for n in range(40)], now=now)
    worker = Worker(store, reference_workflow(LocalModel(usd_per_1k_chars=1e308), GeneratedDocuments()), clock=FakeClock(now),
                    threaded=False, rng=random.Random(1))
    for _ in range(200):  # each run drives one job to the end; at most 200 runs for 40 jobs
        if worker.run_once().outcome == Outcome.IDLE:
            break
    store.close()
    out = run_cli("status", "--db", db, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout, parse_constant=lambda name: pytest.fail(f"status --json printed {name}"))
    extract = next(row for row in report["cost"] if row["step"] == "extract")
    assert extract["results"] == 40 and extract["cost_usd"] is None and extract["cost_usd_avg"] is None
    text = run_cli("status", "--db", db).stdout
    assert "extract           40 results  cost beyond the largest float: check the cost_usd this step reports" in text, text


def test_a_closed_port_is_one_line_that_reads_as_a_sentence():
    """libpq's message ends with a line break and a tab before its hint: escaped, it read 'refused\\n\\tIs'."""
    pytest.importorskip("psycopg")
    out = run_cli("status", "--db", "postgresql://u@127.0.0.1:1/x")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "port 1 failed: Connection refused Is the server running" in lines[0], lines[0]
