"""The command line names itself as it was started and says its version.

Goal: ``crashgate --help`` shows ``usage: crashgate``, ``python -m chaos --help`` shows
``usage: python -m chaos``, and both answer ``--version`` with ``crashgate VERSION`` and exit 0.
Method: real processes; the console script is a file named ``crashgate`` with the text pip writes
for an entry point (the installed wheel's own script is run in tests/test_wheel.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 120
# What pip writes for `crashgate = "chaos.__main__:main"` in [project.scripts].
CONSOLE_SCRIPT = """\
import re
import sys
from chaos.__main__ import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


def _version() -> str:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


@pytest.fixture
def crashgate(tmp_path) -> list[str]:
    """The command that runs a console script named crashgate, as pip installs it."""
    script = tmp_path / "bin" / "crashgate"
    script.parent.mkdir()
    script.write_text(CONSOLE_SCRIPT, encoding="utf-8")
    return [sys.executable, str(script)]


def _run(command: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, cwd=ROOT)


MODULE = [sys.executable, "-m", "chaos"]


@pytest.mark.parametrize("started_as, named", [("script", "crashgate"), ("module", "python -m chaos")])
def test_the_usage_and_an_error_name_the_program_as_it_was_started(crashgate, started_as, named):
    command = crashgate if started_as == "script" else MODULE
    help_ = _run([*command, "--help"])
    assert help_.returncode == 0, help_.stderr
    assert help_.stdout.startswith(f"usage: {named} [-h] [--version]"), help_.stdout[:200]
    sub_help = _run([*command, "plans", "init", "--help"])
    assert sub_help.stdout.startswith(f"usage: {named} plans init "), sub_help.stdout[:200]
    error = _run([*command, "matrix", "--jobs", "-5"])
    assert error.returncode == 2
    assert error.stderr.startswith(f"{named} matrix: error: "), error.stderr
    assert error.stderr.rstrip().endswith(f"see {named} matrix --help"), error.stderr


@pytest.mark.parametrize("started_as", ["script", "module"])
def test_version_prints_crashgate_and_the_version_on_stdout_and_exits_0(crashgate, started_as):
    out = _run([*(crashgate if started_as == "script" else MODULE), "--version"])
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"crashgate {_version()}\n"
    assert out.stderr == ""


def test_a_program_that_calls_main_with_its_own_arguments_sees_python_m_chaos(capsys):
    from chaos.__main__ import main

    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage: python -m chaos [-h] [--version]")
