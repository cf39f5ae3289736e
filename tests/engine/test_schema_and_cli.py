"""A foreign or newer database is refused untouched; the CLI exits 2 with one clear line."""

import hashlib
import sqlite3
import subprocess
import sys

import pytest

from engine import SchemaMismatch, SqliteStore, open_store, InvalidInput


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_a_database_of_another_application_is_refused_and_not_modified(tmp_path):
    path = str(tmp_path / "other.db")
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE invoices (id INTEGER)")
    conn.commit()
    conn.close()
    before = digest(path)
    with pytest.raises(SchemaMismatch, match="not created by crashgate.*invoices"):
        SqliteStore(path)
    assert digest(path) == before


def test_a_database_from_a_newer_engine_is_refused_and_not_modified(db_path):
    SqliteStore(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    before = digest(db_path)
    with pytest.raises(SchemaMismatch, match="schema version 99.*upgrade crashgate"):
        SqliteStore(db_path)
    assert digest(db_path) == before


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
