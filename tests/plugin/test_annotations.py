"""Under GitHub Actions the plugin prints what the command line prints: one ``::error`` workflow
command per finding group of a failing crash_matrix test or fault plan, at the user's line where
the world's ledger knows it (else at the crash point's), titled with the invariant, with the fix
and the pytest command that replays it; and nothing at all outside GitHub Actions.

Tried on planted bugs: the example project's first notify step, which sends the email from inside
the step (examples/invoices/unsafe.py), and a reference engine whose sender marks the outbox row
sent before sending (quality.variants:MarkBeforeSend), whose findings are at crash points.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from chaos.core.annotations import error_command

from .conftest import REPO, unsafe_line

UNSAFE = ("--chaos-points", "8", "--chaos-target", "invoices.crash:unsafe_adapter",
          "fault_plans/every_line.toml", "tests/test_crash_gate.py")


def _errors(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if line.startswith("::error ")]


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one-process", "xdist"])
def test_an_email_sent_inside_a_step_is_one_annotation_per_test_at_the_users_line(example, monkeypatch, workers):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    result = example.runpytest_subprocess(*UNSAFE, *workers)  # under xdist the controller prints them
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    errors = _errors(result)
    # The plan (baseline and 8 points) and the crash_matrix test each fail in one way: one each.
    assert len(errors) == 2, errors
    at = f"::error file=invoices/unsafe.py,line={unsafe_line()},title=crashgate outbox-at-least-once (without any fault)::"
    assert all(line.startswith(at) for line in errors), errors
    assert all("fix: " in line and "StepOutput(effects=...)" in line for line in errors)
    replays = sorted(line.rpartition("; replay: ")[2] for line in errors)
    assert replays[0].startswith("python -m pytest fault_plans/every_line.toml::baseline --chaos-mode fork --chaos-seed 0")
    # The target came from the command line: the replay names it, or it would run the ini file's and pass.
    assert replays[1] == "python -m pytest tests/test_crash_gate.py::test_invoices_survive_a_crash_at_every_line --chaos-target invoices.crash:unsafe_adapter"


def test_outside_github_actions_nothing_is_annotated(example, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    result = example.runpytest_subprocess(*UNSAFE)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "::error" not in result.stdout.str()


SENDER_TEST = '''
import pytest


@pytest.mark.crash_matrix(target="quality.variants:MarkBeforeSend", families=["sender"], faults=["crash"])
def test_a_sender_that_marks_before_sending_is_caught(crash_matrix):
    crash_matrix()
'''


def test_findings_at_crash_points_are_annotated_where_the_command_line_annotates_them(project, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    tests_dir = str(REPO / "tests")
    cli = subprocess.run([sys.executable, "-m", "chaos", "matrix", "--target", "quality.variants:MarkBeforeSend",
                          "--family", "sender", "--faults", "crash", "-n", "1"], capture_output=True, text=True, timeout=600,
                         cwd=str(project.path), env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), tests_dir])))
    assert cli.returncode == 1, cli.stdout + cli.stderr
    expected = [line.partition("::")[2].rpartition("; replay: ")[0] for line in cli.stdout.splitlines() if line.startswith("::error ")]
    # The crash points are lines of the engine, outside this project: annotated without a file,
    # never at an absolute path GitHub cannot attach to the repository.
    assert expected and all(line.startswith("error title=") for line in expected), cli.stdout

    project.makepyfile(test_sender=SENDER_TEST)
    result = project.runpytest()
    result.assert_outcomes(failed=1)
    errors = _errors(result)
    # The same findings at the same lines, each once; only the replay command is pytest's.
    assert [line.partition("::")[2].rpartition("; replay: ")[0] for line in errors] == expected
    assert all("; replay: python -m pytest test_sender.py::test_a_sender_that_marks_before_sending_is_caught --chaos-points"
               in line for line in errors), errors


def test_a_known_finding_is_not_annotated(project, monkeypatch, tmp_path):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    tests_dir = str(REPO / "tests")
    wrote = subprocess.run([sys.executable, "-m", "chaos", "baseline", "--target", "quality.variants:MarkBeforeSend",
                            "--family", "sender", "--faults", "crash", "-n", "1"], capture_output=True, text=True, timeout=600,
                           env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), tests_dir])))
    assert wrote.returncode == 0, wrote.stderr
    known = tmp_path / "crashgate-baseline.json"
    known.write_text(wrote.stdout)
    project.makepyfile(test_sender=SENDER_TEST)
    result = project.runpytest("--chaos-baseline", str(known))
    result.assert_outcomes(passed=1)
    assert _errors(result) == []


def test_an_annotation_escapes_what_would_end_its_properties_or_its_line():
    line = error_command("", None, "crashgate a,b: c", "first\nsecond 100%")
    assert line == "::error title=crashgate a%2Cb%3A c::first%0Asecond 100%25"


def test_an_annotation_names_a_file_of_the_repository_relative_to_it_and_never_a_path_outside(tmp_path, monkeypatch):
    """GitHub attaches an annotation to a file of the repository, named relative to its root: a
    user's line in site-packages or a temporary folder (an absolute path) attached to nothing."""
    from chaos.core.annotations import repository_root
    from chaos.core.points import Point

    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "app").mkdir()
    (repo / "app" / "orders.py").write_text("def charge(ctx):\n    return ctx\n")
    venv = repo / ".venv" / "lib" / "python3.11" / "site-packages" / "engine"
    venv.mkdir(parents=True)
    (venv / "_sqlstore.py").write_text("x = 1\n")
    elsewhere = tmp_path / "elsewhere" / "orders.py"
    elsewhere.parent.mkdir()
    elsewhere.write_text("x = 1\n")
    monkeypatch.chdir(repo / "app")  # pytest run from a folder of the work tree
    assert repository_root() == os.path.realpath(repo)

    def at(where, point=None):
        return error_command(where, point, "crashgate same-outcome", "seen").partition(",title=")[0]

    assert at("orders.py:2") == "::error file=app/orders.py,line=2"  # relative to the working directory
    assert at(f"{repo / 'app' / 'orders.py'}:2") == "::error file=app/orders.py,line=2"
    engine_point = Point(str(venv / "_sqlstore.py"), 1, 1, "f")
    outside = [at(f"{elsewhere}:1"), at("/usr/lib/python3/site-packages/engine/_sqlstore.py:301"), at(f"{venv / '_sqlstore.py'}:1"),
               at("", engine_point), at(f"{elsewhere}:1", engine_point)]
    assert all(line == "::error title=crashgate same-outcome::seen" for line in outside), outside
    # A user's line outside, and a point of the record in the repository: at the point.
    assert at(f"{elsewhere}:1", Point(str(repo / "app" / "orders.py"), 2, 1, "charge")) == "::error file=app/orders.py,line=2"
    # Without a git work tree, pytest's rootdir is the repository.
    assert repository_root(str(tmp_path / "elsewhere"), rootdir=str(tmp_path)) == os.path.realpath(tmp_path)
