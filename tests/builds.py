"""Building crashgate's distributions from the checkout, for the tests of the wheel and the sdist.

Each build is a real one, in the build backend's own isolated environment (setuptools from
pyproject.toml's ``build-system``), with its output kept: a warning of the backend's is the first
sign of a configuration that a later setuptools refuses.

The wheel is built once per test run, and installed once into one virtual environment: the tests
of the wheel and the tutorial followed from it read the same build, whichever test process (xdist
worker) asks first. A build costs tens of seconds on a busy machine and every one is the same
``pip wheel`` of the same checkout, so a second build would prove nothing the first does not.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Iterator, NamedTuple

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


class Built(NamedTuple):
    wheel: Path
    log: str  # what pip and the build backend printed, warnings included


def _run_folder(tmp_path_factory) -> Path:
    """The temporary folder every test process of this run shares: under xdist each worker's base
    folder is ``popen-gwN`` inside it, without xdist it is the base folder itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def _once(tmp_path_factory, name: str) -> Iterator[Path]:
    """``name``'s folder in the run's shared folder, held under an exclusive lock so that one test
    process makes it while the others wait, then read what it made."""
    shared = _run_folder(tmp_path_factory)
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, even if the build fails
        folder = shared / name
        folder.mkdir(exist_ok=True)
        yield folder


def built_wheel(tmp_path_factory) -> Built:
    """The wheel built from the checkout (``pip wheel --no-deps``, verbose so that the build
    backend's warnings are kept), once per test run."""
    with _once(tmp_path_factory, "crashgate-wheel") as out:
        log = out / "build.log"
        if not log.exists():  # written last: a build that failed is tried again by the next test
            with source_tree_lock():
                build = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--verbose", "-w", str(out), str(ROOT)],
                            cwd=out, timeout=BUILD_TIMEOUT_S)
            log.write_text(build.stdout + build.stderr)
        wheels = list(out.glob("crashgate-*.whl"))
        if len(wheels) != 1:
            raise AssertionError(f"expected one wheel in {out}, found {wheels}")
        return Built(wheels[0], log.read_text())


def installed_wheel(tmp_path_factory) -> Path:
    """A fresh virtual environment with the built wheel installed, once per test run: with the
    system's site-packages, so that pytest, Hypothesis and the rest need no download, and
    ``--force-reinstall`` so that the wheel's copy is the one imported, never an editable install
    of a checkout. The tests run their commands in folders of their own outside it."""
    wheel = built_wheel(tmp_path_factory).wheel
    with _once(tmp_path_factory, "crashgate-venv") as venv:
        done = venv / "installed"
        if not done.exists():  # written last, as the wheel's log is
            run([sys.executable, "-m", "venv", "--clear", "--system-site-packages", str(venv)], cwd=venv.parent)
            run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", str(wheel)],
                cwd=venv.parent, env=clean_env(venv))
            done.write_text(str(wheel))
        return venv
