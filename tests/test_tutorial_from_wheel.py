"""The tutorial, followed as a new user does: crashgate from its wheel alone, in a fresh folder.

Goal: a reader who installs the built wheel into a project of their own and copies the tutorial's
blocks gets a gate that is green on their workflow, with their own payloads and job ids, and red,
naming their job and their line, once a step sends its email itself. Method: build the wheel from
the checkout, install it into a fresh virtual environment (with the system's site-packages, so
that pytest and the rest need no download; ``--force-reinstall`` so that the wheel's copy is the
one imported), then run the tutorial page's blocks in order, as tests/test_docs_code.py reads
them (files written, commands run, their exit status and expected text checked), in a folder
outside the checkout with no PYTHONPATH. The page is the script: it cannot drift from what runs.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from builds import installed_wheel
from test_docs_code import blocks

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial" / "first-fault-plan.md"
BUILD_TIMEOUT_S = 300
BLOCK_TIMEOUT_S = 300


def _ok(command: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = BUILD_TIMEOUT_S) -> str:
    out = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise AssertionError(f"{' '.join(command)} exited {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A virtual environment with the wheel built from this checkout, and the environment to run in it."""
    venv = installed_wheel(tmp_path_factory)  # the run's one build of the wheel, installed once (tests/builds.py)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP") and not k.startswith(("CRASHGATE_", "PYTEST_"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"  # `python` is the environment's
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return venv, env


@pytest.mark.slow
def test_the_tutorial_from_the_wheel_alone_is_green_on_the_users_workflow_then_red_naming_its_job_and_line(installed, tmp_path):
    venv, env = installed
    project = tmp_path / "project"
    project.mkdir()
    imported = _ok(["python", "-c", "import chaos, engine; print(chaos.__file__); print(engine.__file__)"], cwd=project, env=env).split()
    for path in imported:
        assert Path(path).resolve().is_relative_to(venv.resolve()), f"imported {path}, not the wheel installed in {venv}"
    ran: list[str] = []
    for block in blocks(TUTORIAL):
        if block.file:
            (project / block.file).parent.mkdir(parents=True, exist_ok=True)
            (project / block.file).write_text(block.code)
            continue
        if block.kind not in ("bash", "python") or block.skip is not None:
            continue
        assert not block.checkout, f"{block.where}: the tutorial runs in the reader's project, never in a checkout"
        command = ["bash", "-e", "-o", "pipefail", "-c", block.code] if block.kind == "bash" else ["python", "-c", block.code]
        out = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        shown = f"{block.where}: exit {out.returncode}\n--- stdout\n{out.stdout[-3000:]}\n--- stderr\n{out.stderr[-3000:]}"
        assert out.returncode == block.exit, f"expected exit {block.exit}; {shown}"
        for text in block.expect:
            assert text in out.stdout + out.stderr, f"{text!r} not in the output; {shown}"
        assert str(ROOT) not in out.stdout + out.stderr, f"the checkout was used; {shown}"
        ran.append(f"{block.exit}:{block.code.strip().splitlines()[-1]}")
    # The page's own plan ran green on the reader's workflow, then red on the unsafe step.
    green = [r for r in ran if r.startswith("0:") and "notes_every_line.toml" in r and "unsafe" not in r]
    red = [r for r in ran if r.startswith("1:") and "notes_crash_unsafe:adapter" in r]
    assert green and red, ran
    adapter = (project / "notes_crash.py").read_text()
    assert "def payload(self, job_id)" in adapter and "def job_ids(self, n)" in adapter  # its own payloads and job ids
