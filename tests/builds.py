"""Building crashgate's distributions from the checkout, for the tests of the wheel and the sdist.

Each build is a real one, in the build backend's own isolated environment (setuptools from
pyproject.toml's ``build-system``), with its output kept: a warning of the backend's is the first
sign of a configuration that a later setuptools refuses.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 300
RUN_TIMEOUT_S = 300


@contextlib.contextmanager
def source_tree_lock() -> Iterator[None]:
    """Hold the checkout for one build at a time. A build writes ``crashgate.egg-info`` and ``build/``
    into the checkout itself, so two builds at once (the wheel's, the sdist's and the tutorial's
    tests under pytest-xdist) read each other's half-written files and fail; every process of the
    test session takes this lock (a file lock in the temporary folder, named after the checkout)
    around its build."""
    name = hashlib.sha256(str(ROOT).encode()).hexdigest()[:16]
    with open(Path(tempfile.gettempdir()) / f"crashgate-build-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def run(command: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = RUN_TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run ``command`` and return what it printed; a non-zero exit fails the test with its output's tail."""
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(command)} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def warnings_in(log: str) -> list[str]:
    """The lines of a build's output that warn about the project: a Python warning of the backend's
    (a deprecation, say) and setuptools' own ``warning:`` lines (a MANIFEST.in pattern that matches
    nothing). Not the environment's: pip's own ``WARNING:`` lines (running as root, an index folder
    it skips) and byte-compiling switched off by PYTHONDONTWRITEBYTECODE."""
    found = []
    for line in log.splitlines():
        text = line.strip()
        if text.startswith("WARNING:") or "byte-compiling is disabled" in text:
            continue
        if "Warning" in text or "deprecat" in text.lower() or text.lower().startswith("warning:"):
            found.append(text)
    return found


def clean_env(venv: Path | None = None, *, pythonpath: Path | None = None) -> dict[str, str]:
    """This process's environment without anything that would pick the code to import or change
    crashgate's settings; then ``venv``'s scripts first on PATH, or ``pythonpath`` as PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP") and not k.startswith("CRASHGATE_")}
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(venv)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return env
