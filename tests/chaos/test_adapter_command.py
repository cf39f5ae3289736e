"""``python -m chaos adapter``: every capability of a session that opened is known, offered or
not; none is left as "?" (``configure_worker`` was, whatever the session had)."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINYFLOW = os.path.join(ROOT, "examples", "minimal_engine")


def _capability_lines(*args: str, cwd: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([cwd, ROOT]))
    done = subprocess.run([sys.executable, "-m", "chaos", "adapter", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split(None, 1) for line in done.stdout.splitlines() if line.startswith("  ")]
    return {rest.split(":")[0].split(" =")[0]: f"{mark} {rest}" for mark, rest in rows}


def test_a_session_with_configure_worker_shows_it_offered():
    lines = _capability_lines(cwd=ROOT)  # the reference engine's session rebuilds its worker with a family's settings
    assert lines["configure_worker"] == "yes configure_worker", lines["configure_worker"]
    assert not [line for line in lines.values() if line.startswith("?")], lines


def test_a_session_without_configure_worker_shows_what_its_absence_disables():
    lines = _capability_lines("--target", "crash:adapter", cwd=TINYFLOW)
    assert lines["configure_worker"].startswith("no configure_worker: this disables the inline-steps family; "
                                                "offer configure_worker(**settings): "), lines["configure_worker"]
    assert not [line for line in lines.values() if line.startswith("?")], lines


def test_every_session_capability_names_the_methods_a_session_is_asked_for():
    from chaos.adapter import CAPABILITIES, SESSION_METHODS

    assert sorted(c.name for c in CAPABILITIES if c.where == "session") == sorted(SESSION_METHODS)


def test_every_problem_of_an_adapter_is_one_line_of_its_own_and_exit_2(tmp_path):
    """A wrong word, a wrong policy and a schema that does not match the engine are said together,
    each naming its fix, where the first one alone used to hide the others (or, for a wrong word,
    the command listed the capabilities and exited 0)."""
    (tmp_path / "mine.py").write_text(
        "import crash\n"
        "from chaos.adapters.sql import JobTable, SqlSchema\n"
        "class Mine(crash.TinyflowAdapter):\n"
        "    receiver = 'exactly-once'\n"
        "    iteration = 'forever'\n"
        "    schema = SqlSchema(JobTable(state='status'))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), TINYFLOW, ROOT]))
    done = subprocess.run([sys.executable, "-m", "chaos", "adapter", "--target", "mine:Mine"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 3, done.stderr
    assert all(line.startswith("error: mine:Mine: ") for line in lines), lines
    assert "iteration is 'forever'; use 'one-call'" in lines[0]
    assert "receiver is 'exactly-once'; use 'dedupes'" in lines[1]
    assert "table 'job' has no column 'status' (JobTable(state=...)" in lines[2]
