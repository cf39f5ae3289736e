"""``python -m chaos``: a bad argument or a bad target is one line with exit status 2, never a
traceback and never a run that was not asked for."""

import os
import subprocess
import sys

import pytest


def run_chaos(*args):
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True, timeout=300)


def assert_one_line_error(out, *fragments):
    assert out.returncode == 2, (out.returncode, out.stdout[-500:], out.stderr[-2000:])
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.mark.parametrize(
    "args, named",
    [
        (("--jobs", "-5"), "--jobs"),
        (("-n", "0"), "--jobs"),
        (("--pairs", "-3"), "--pairs"),
        (("--sample", "0"), "--sample"),
        (("--sample", "-1"), "--sample"),
        (("--sample", "many"), "--sample"),
        (("--mode", "teleport"), "--mode"),
    ],
)
def test_matrix_refuses_a_number_out_of_range_in_one_line(args, named):
    assert_one_line_error(run_chaos("matrix", *args), named)


@pytest.mark.parametrize("target", ["json:dumps", "os:remove", "os:getcwd", ".relative:adapter", "no_such_module_xyz:a", "chaos:nope", "sys:exit"])
def test_a_target_that_is_not_an_adapter_is_one_line_naming_it(target):
    assert_one_line_error(run_chaos("matrix", "--target", target, "--family", "sender", "--faults", "crash"), target)


@pytest.mark.parametrize("command", [["matrix", "--family", "sender", "--faults", "crash"], ["adapter"], ["explore"]])
def test_a_target_is_checked_before_it_is_called(command):
    """os.abort takes no arguments: called to make an adapter, it ended the process with SIGABRT
    and no message. A target is called only once it is an adapter class or a factory function."""
    out = run_chaos(command[0], "--target", "os:abort", *command[1:])
    assert out.returncode != -6, "the target was called: the process died of SIGABRT"
    assert_one_line_error(out, "'os:abort' is not an adapter", "built-in function", "an adapter class")


def test_explore_refuses_a_target_that_is_not_an_adapter_and_zero_examples():
    assert_one_line_error(run_chaos("explore", "--target", "json:dumps"), "json:dumps")
    assert_one_line_error(run_chaos("explore", "--max-examples", "0"), "--max-examples")


@pytest.mark.parametrize("args, named", [(("--faults", ""), "no fault kind given"), (("--faults", " , "), "no fault kind given"),
                                         (("--point", "", "--family", "sender"), "point '' names no scenario"),
                                         (("--point", "clean::x", "--family", "sender"),
                                          "point 'clean::x' is in family 'clean', which the families asked for (sender) leave out")])
def test_a_matrix_asked_to_run_nothing_is_refused_not_passed(args, named):
    """With no fault kind the matrix ran 0 points and exited 0: a gate that passed having checked nothing."""
    assert_one_line_error(run_chaos("matrix", "-n", "1", *args), named)


def test_ctrl_c_stops_the_matrix_with_exit_130_and_no_traceback(tmp_path):
    import signal
    import time

    work = tmp_path / "work"
    work.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "matrix", "-n", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path, start_new_session=True, env={**os.environ, "CRASHGATE_WORKDIR": str(work)})
    deadline = time.monotonic() + 120
    while not any(work.iterdir()) and time.monotonic() < deadline:  # its scratch folder: it is past its imports, running
        time.sleep(0.05)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, err[-2000:])
    assert "interrupted: no verdict" in err and "Traceback" not in err, err[-2000:]


@pytest.mark.parametrize("command", [["matrix", "-n", "1", "--sample", "1"], ["baseline"]])
def test_a_postgresql_server_that_cannot_be_reached_is_one_line_without_its_password(command):
    out = run_chaos(*command, "--db", "postgresql://nobody:secret@127.0.0.1:1/db")
    assert_one_line_error(out, "--db: cannot connect to the PostgreSQL server", "port 1 failed", "check the URL and that the server runs")
    assert "secret" not in out.stderr
    # libpq's own message for a URL it cannot parse may quote the password: none of its text is shown
    out = run_chaos(*command, "--db", "postgresql://nobody:s%zzecret@127.0.0.1:1/db")
    assert_one_line_error(out, "--db: not a PostgreSQL URL libpq can read")
    assert "ecret" not in out.stderr


def test_a_target_whose_module_exits_on_import_is_one_line_not_a_silent_exit_0(tmp_path):
    (tmp_path / "exiter.py").write_text("import sys\nsys.exit(0)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for command, named in [([sys.executable, "-m", "chaos", "matrix", "-n", "1", "--target", "exiter:x"], "cannot load target 'exiter:x'"),
                           ([sys.executable, "-m", "engine", "states", "--workflow", "exiter:x"], "cannot load workflow 'exiter:x'")]:
        out = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
        assert_one_line_error(out, named, "importing it called sys.exit(0)")


def test_a_session_that_cannot_be_opened_is_said_plainly_in_the_capability_lines(tmp_path, monkeypatch):
    """It read 'capability missing:r: opening a session failed' (a fixed slice of the line)."""
    from chaos.cli import _disabled_by_missing_capabilities

    (tmp_path / "broken.py").write_text(
        "from chaos import ReferenceAdapter\n"
        "class Broken(ReferenceAdapter):\n"
        "    def open(self, *args, **kwargs):\n"
        "        raise RuntimeError('no such table: main.task')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    lines = _disabled_by_missing_capabilities("broken:Broken")
    failed = [line for line in lines if "opening a session failed" in line]
    assert failed and all(line.startswith("capability check failed: opening a session failed: ") for line in failed), lines
    assert "no such table: main.task" in failed[0]
