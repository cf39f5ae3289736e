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
