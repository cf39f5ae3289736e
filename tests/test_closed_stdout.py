"""Every command of both command lines survives a closed stdout (``| head`` that stopped
reading): no BrokenPipeError traceback, no "Exception ignored" at exit, and the exit status of the
work itself (0 here, where nothing fails)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from chaos.cli import COMMANDS as CHAOS_COMMANDS
from engine._cli import COMMANDS as ENGINE_COMMANDS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLOSED_PORT_URL = "http://127.0.0.1:9/effects"  # the discard port: nothing listens, every send fails

ENGINE_ARGS = {
    "states": [],
    "submit": ["doc-9", '{"source": "doc-9"}'],
    "work": [],
    "send": ["--url", CLOSED_PORT_URL],
    "status": [],
    "requeue": ["doc-failed"],
    "resolve": ["doc-review", "cancel"],
    "cancel": ["doc-2"],
    "replay": ["doc-1", "extract"],
    "example": [],
}
CHAOS_ARGS = {
    "matrix": ["--family", "sender", "--faults", "crash", "--sample", "2", "--mode", "inprocess"],
    "explore": ["--max-examples", "2"],
    "adapter": [],
    "survey": ["--engine", "reference", "--budget", "small", "-n", "1", "--plain"],
    "baseline": ["--family", "sender", "--faults", "crash", "--sample", "2", "--mode", "inprocess"],
    "demo": ["--jobs", "4", "--kill-every", "0", "--kills-min", "0", "--plain"],
    "plans": ["init", "{tmp}/fault_plans"],  # into the test's folder, never the checkout's own plans
    "soak": ["--jobs", "4", "--kill-every", "0", "--timeout", "60"],
}


def run_with_stdout_closed(args: list[str], cwd: str) -> subprocess.CompletedProcess:
    """Run ``args`` with a stdout pipe whose reading end is closed before the command writes."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env=os.environ)
    proc.stdout.close()
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return subprocess.CompletedProcess(args, proc.returncode, "", err.decode(errors="replace"))


@pytest.fixture
def engine_db(tmp_path):
    """A database with a job in every state the commands need: delivered, failed, review, pending."""
    from engine import FakeClock, SqliteStore, Worker, default_workflow

    db = str(tmp_path / "e.db")
    store = SqliteStore(db)
    store.submit_many([("doc-1", {"source": "doc-1"}), ("doc-failed", {"source": ""})], now=0.0)
    worker = Worker(store, default_workflow(), clock=FakeClock(0.0), threaded=False)
    while worker.run_once().outcome != "idle":
        pass
    store.submit_many([("doc-2", {"source": "doc-2"}), ("doc-review", {"source": "doc-review"})], now=0.0)
    store.conn.execute("UPDATE job SET state = 'needs_human', next_run_at = NULL WHERE id = 'doc-review'")
    store.close()
    return db


def assert_quiet(out: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in out.stderr, out.stderr[-3000:]
    assert "BrokenPipe" not in out.stderr, out.stderr[-3000:]
    assert "Exception ignored" not in out.stderr, out.stderr[-3000:]
    assert out.returncode == 0, (out.returncode, out.stderr[-3000:])


def test_every_engine_command_is_listed_here():
    assert set(ENGINE_ARGS) == set(ENGINE_COMMANDS)
    assert set(CHAOS_ARGS) == set(CHAOS_COMMANDS)


@pytest.mark.parametrize("command", ENGINE_COMMANDS)
def test_an_engine_command_survives_a_closed_stdout(command, engine_db, tmp_path):
    db = ["--db", str(tmp_path / "example.db")] if command == "example" else [] if command == "states" else ["--db", engine_db]
    assert_quiet(run_with_stdout_closed([sys.executable, "-m", "engine", command, *db, *ENGINE_ARGS[command]], str(tmp_path)))


@pytest.mark.slow
@pytest.mark.parametrize("command", CHAOS_COMMANDS)
def test_a_chaos_command_survives_a_closed_stdout(command, tmp_path):
    args = [arg.format(tmp=tmp_path) for arg in CHAOS_ARGS[command]]
    assert_quiet(run_with_stdout_closed([sys.executable, "-m", "chaos", command, *args], ROOT))
