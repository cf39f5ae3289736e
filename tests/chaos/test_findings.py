"""Failures a CI user can act on: grouped findings with the user's line and the fix, GitHub
annotations, and a file of known findings that turns a known finding green and a new one red.

Tried on code that is not the reference engine: the example project's unsafe invoice workflow
(an email sent from inside the step) and tinyflow (examples/minimal_engine), an engine of its own.
"""

from __future__ import annotations

import json
import re
import os
import subprocess
import sys

import pytest

from chaos.core.findings import normalise, user_line

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "examples")
TINYFLOW = os.path.join(EXAMPLES, "minimal_engine")
OUTPUT_LINES_MAX = 40


def _unsafe_line() -> int:
    with open(os.path.join(EXAMPLES, "invoices", "unsafe.py")) as f:
        return next(n for n, line in enumerate(f, 1) if "UNSAFE: sent before the step commits" in line)


def chaos(*args: str, cwd: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ, PYTHONPATH=os.pathsep.join([cwd, ROOT]), **(env or {}))
    if "GITHUB_ACTIONS" not in (env or {}):
        full_env.pop("GITHUB_ACTIONS", None)  # the output without annotations, even on GitHub
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def unsafe_run() -> subprocess.CompletedProcess:
    # A seeded sample of 400 points (about 8 a family, crashes and pauses): every family's baseline
    # still runs, and each point of the 35 families that fail without a fault fails as its baseline
    # does. The whole matrix (60,798 points, 60 CPU-seconds against 12) prints the same finding.
    return chaos("matrix", "--target", "invoices.crash:unsafe_adapter", "-n", "2", "--sample", "400", cwd=EXAMPLES,
                 env={"GITHUB_ACTIONS": "true"})


def test_one_unsafe_step_is_one_finding_that_names_the_fix_and_the_users_line(unsafe_run):
    out = unsafe_run.stdout
    assert unsafe_run.returncode == 1, out + unsafe_run.stderr
    text = [line for line in out.splitlines() if not line.startswith("::")]
    assert len(text) <= OUTPUT_LINES_MAX, "\n".join(text)
    assert re.match(r"FAILS WITHOUT ANY FAULT in \d+ of \d+ families \(clean, ", text[0]), text[0]
    assert f"sent from invoices/unsafe.py:{_unsafe_line()}" in text[0]
    assert "outbox-at-least-once" in text[0] and "points" in text[0]
    assert any("fix:" in line and "StepOutput(effects=...)" in line for line in text)
    assert not any(line.startswith("FINDING") for line in text)  # every point fails as the baselines do


def test_under_github_actions_each_finding_is_an_error_annotation_at_the_users_line(unsafe_run):
    errors = [line for line in unsafe_run.stdout.splitlines() if line.startswith("::error ")]
    assert len(errors) == 1, errors
    # Named relative to the repository's root (the git work tree), as GitHub attaches annotations.
    from chaos.core.annotations import repository_root

    shown = os.path.relpath(os.path.join(EXAMPLES, "invoices", "unsafe.py"), repository_root(EXAMPLES))
    assert errors[0].startswith(f"::error file={shown},line={_unsafe_line()},title=crashgate outbox-at-least-once")
    assert "%0A" not in errors[0].split("::", 2)[1]  # properties are escaped, one line


def test_distinct_findings_are_numbered_once_each_with_a_replay():
    done = chaos("matrix", "--target", "crash:adapter", "--family", "clean", "--faults", "interleave", "--pairs", "20",
                 "-n", "2", cwd=TINYFLOW)
    assert done.returncode == 1, done.stdout + done.stderr
    headers = [line for line in done.stdout.splitlines() if line.startswith("FINDING")]
    assert headers and all("fenced-writes" in h for h in headers), done.stdout
    assert len(done.stdout.splitlines()) <= OUTPUT_LINES_MAX, done.stdout
    assert "guard every write with it (WHERE token = :mine)" in done.stdout
    assert "replay: python -m chaos matrix --target crash:adapter" in done.stdout


def test_a_file_of_known_findings_turns_a_known_finding_green_and_a_new_one_red(tmp_path):
    known = tmp_path / "crashgate-baseline.json"
    wrote = chaos("baseline", "--target", "crash:adapter", "--family", "lost-lease", "--faults", "crash", "-n", "2", cwd=TINYFLOW)
    assert wrote.returncode == 0, wrote.stderr
    known.write_text(wrote.stdout)
    data = json.loads(wrote.stdout)
    assert {row["invariant"] for row in data["findings"]} == {"bounded-spend"}
    assert all(not any(ch.isdigit() for ch in row["cause"].split("(")[0]) for row in data["findings"])  # no line numbers, no ids

    same = chaos("matrix", "--target", "crash:adapter", "--family", "lost-lease", "--faults", "crash", "--baseline", str(known),
                 "-n", "2", cwd=TINYFLOW)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "new" in same.stdout and ", 0 new" in same.stdout

    more = chaos("matrix", "--target", "crash:adapter", "--family", "lost-lease", "--family", "clean", "--faults",
                 "crash,interleave", "--pairs", "10", "--baseline", str(known), "-n", "2", cwd=TINYFLOW)
    assert more.returncode == 1, more.stdout + more.stderr
    assert "FINDING 1: fenced-writes" in more.stdout and "bounded-spend" not in more.stdout.split("crash coverage")[0]


def test_a_known_finding_that_no_longer_occurs_is_reported(tmp_path):
    known = tmp_path / "known.json"
    known.write_text(json.dumps({"crashgate_baseline": 1, "target": "crash:adapter", "findings": [
        {"family": "clean", "fault": "crash", "invariant": "drains", "cause": "job '…' is still '…' after the system drained"}]}))
    done = chaos("matrix", "--target", "crash:adapter", "--family", "clean", "--faults", "crash", "--baseline", str(known), cwd=TINYFLOW)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "known findings no longer seen (1)" in done.stdout


@pytest.mark.parametrize("content, says", [
    (None, "does not exist; write one with: python -m chaos baseline --target X > "),
    ("{not json", "is not JSON"),
    ('{"findings": 3}', "is not a file of known findings"),
    ("[" * 20_000, "is nested too deeply to be a file of known findings"),
    ("fifo", "is not a regular file"),
])
def test_a_bad_file_of_known_findings_is_one_line_and_exit_2(tmp_path, content, says):
    """Only a missing file is one to write: a file that is there and is something else (a database
    passed by mistake) is left alone, and the message does not suggest overwriting it."""
    path = tmp_path / "known.json"
    if content == "fifo":
        os.mkfifo(path)
    elif content is not None:
        path.write_text(content)
    done = chaos("matrix", "--family", "clean", "--baseline", str(path), cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr
    if content is not None:
        assert "it is left as it is: pass the file that python -m chaos baseline wrote" in done.stderr
        assert "> " not in done.stderr


def test_a_deeply_nested_file_of_known_findings_is_a_usage_error_of_the_plugin(pytester):
    (pytester.path / "known.json").write_text("[" * 20_000)
    pytester.makepyfile(test_ok="def test_ok(): pass")
    result = pytester.runpytest("--chaos-baseline", "known.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is nested too deeply to be a file of known findings" in result.stderr.str()


def test_a_cause_keeps_the_users_line_and_drops_what_varies():
    detail = "effect 'inv-7:email' arrived at the receiver without a committed outbox row (sent from invoices/unsafe.py:25)"
    assert normalise(detail) == "effect '…' arrived at the receiver without a committed outbox row (sent from invoices/unsafe.py:25)"
    assert user_line(detail) == "invoices/unsafe.py:25"
    assert normalise("job 'a' step 'b': 3 paid calls") == normalise("job 'c' step 'd': 4 paid calls")


def test_a_finding_counts_points_not_violations():
    """A point that breaks an invariant twice alike (two jobs, say) is one point of its finding: the
    count was of violations, and read '64 points' of a run of 60."""
    from types import SimpleNamespace

    from chaos.core.findings import findings, headlines
    from chaos.core.invariants import Violation

    def result(*details):
        return SimpleNamespace(family="clean", fault="interleave",
                               outcome=SimpleNamespace(violations=[Violation("fenced-writes", d) for d in details]))

    twice = result("worker 'w-1' wrote job 'doc-1' after 'w-2' took it over", "worker 'w-1' wrote job 'doc-2' after 'w-2' took it over")
    once = result("worker 'w-1' wrote job 'doc-3' after 'w-2' took it over")
    report = SimpleNamespace(baselines={}, results=[twice, once])
    [finding] = findings(report)
    assert (finding.points, finding.families["clean"], finding.faults["interleave"]) == (2, 2, 2)
    base = SimpleNamespace(violations=[Violation("fenced-writes", "worker 'w-9' wrote job 'doc-9' after 'w-8' took it over")])
    [head] = headlines(SimpleNamespace(baselines={"clean": base}, results=[twice, once]))
    assert head.points == 2


def test_jobs_stuck_in_distinct_states_are_distinct_findings_each_with_its_points():
    """A pipeline that loses its job after each step leaves it stuck in a different state at each
    point: three places of the engine that lose it, three findings (they were one, shown as the
    first point's state). Jobs stuck in the same state at several points still fold into one."""
    from types import SimpleNamespace

    from chaos.core.findings import findings, record_findings
    from chaos.core.invariants import Violation

    stuck = ["fetch:done"] * 3 + ["extract:done"] * 2 + ["verify:done"]
    details = [f"job 'doc-{n}' is still {state!r} after the system drained" for n, state in enumerate(stuck)]
    results = [SimpleNamespace(family="pipeline", fault="crash", outcome=SimpleNamespace(violations=[Violation("drains", d)]))
               for d in details]
    found = findings(SimpleNamespace(baselines={}, results=results))
    assert [(f.cause, f.points) for f in found] == [
        ("job '…' is still 'fetch:done' after the system drained", 3),
        ("job '…' is still 'extract:done' after the system drained", 2),
        ("job '…' is still 'verify:done' after the system drained", 1)]
    records = [{"kind": "point", "violations": [("drains", d)], "failures": [], "nodeid": f"p{n}"} for n, d in enumerate(details)]
    assert [(g.example, len(g.records)) for g in record_findings(records)] == [
        (details[0], 3), (details[3], 2), (details[5], 1)]
