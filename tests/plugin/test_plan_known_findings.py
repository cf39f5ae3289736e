"""A file of known findings (``--chaos-baseline``) applies to fault plans as to crash_matrix tests:
a plan item whose every violation is a known finding is an xfail naming the file, a new finding
still fails, and the summary names the known findings no longer seen.

Tried on the example project's own workflow, not the reference one: its first notify step sends
the email from inside the step (examples/invoices/unsafe.py), a finding of the plan
``every_line``; a second planted bug sends it from another module's step, a finding that file
does not know.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chaos.core.findings import normalise

from .conftest import REPO, unsafe_line

SECOND_BUG = '''
"""A second planted bug: another notify step that emails from inside the step."""

import os

from engine import Step, StepOutput, Workflow
from invoices.crash import InvoiceAdapter
from invoices.workflow import ACCOUNTS, build_workflow

HERE = os.path.abspath(__file__)


class SecondUnsafe(InvoiceAdapter):
    def workflow(self, world):
        safe = build_workflow(world.model, world.documents)

        def notify(ctx):
            world.sender.send(f"{ctx.job_id}:email", "email", {"to": ACCOUNTS})  # BUG: sent before the step commits
            return StepOutput({"notified": ACCOUNTS})

        return Workflow("invoices", [*safe.steps[:-1], Step("notify", notify)])

    def trace_paths(self):
        return super().trace_paths() + [HERE]
'''
PLAN = ("fault_plans/every_line.toml", "--chaos-points", "8", "-rx")


def _known_file(path, line: int) -> str:
    """The file ``python -m chaos baseline`` writes for the plan's finding: its family is the
    plan's name, its fault "" (the baseline item) or the item's kind (crash)."""
    cause = normalise("effect 'inv-2024-001:email' arrived at the receiver without a committed outbox row "
                      f"(sent from invoices/unsafe.py:{line})")
    rows = [{"family": "every_line", "fault": fault, "invariant": "outbox-at-least-once", "cause": cause} for fault in ("", "crash")]
    path.write_text(json.dumps({"crashgate_baseline": 1, "target": "invoices.crash:unsafe_adapter", "findings": rows}))
    return str(path)


def test_a_known_finding_of_a_plan_is_an_xfail_and_a_new_one_still_fails(example, tmp_path):
    known = _known_file(tmp_path / "crashgate-baseline.json", unsafe_line())
    unsafe = ("--chaos-target", "invoices.crash:unsafe_adapter")

    red = example.runpytest_subprocess(*PLAN, *unsafe)
    red.assert_outcomes(failed=9)  # without the file: the baseline item and its 8 points

    green = example.runpytest_subprocess(*PLAN, *unsafe, "--chaos-baseline", known)
    assert green.ret == pytest.ExitCode.OK, green.stdout.str()
    green.assert_outcomes(xfailed=9)
    out = green.stdout.str()
    assert "XFAIL fault_plans/every_line.toml::baseline - known finding (in " in out
    assert "crashgate-baseline.json): outbox-at-least-once" in out
    assert "crashgate-baseline.json): 2 seen, 0 new" in out
    assert "no longer seen" not in out
    # The summary lists only what is new: the known ones are counted, not listed as violated.
    assert "known findings: 9 violated points or scenarios, all in the file of known findings (not listed)" in out
    assert "\nfindings:" not in out

    example.makepyfile(second_bug=SECOND_BUG)
    new = example.runpytest_subprocess(*PLAN, "--chaos-target", "second_bug:SecondUnsafe", "--chaos-baseline", known)
    new.assert_outcomes(failed=9)
    out = new.stdout.str()
    assert "(sent from second_bug.py:" in out
    assert "crashgate-baseline.json): 0 seen, 2 new" in out
    assert "\nfindings: 1 finding in 9 violated" in out and "all in the file of known findings (not listed)" not in out
    assert "known findings no longer seen (2), to drop from " in out
    assert "  outbox-at-least-once in family 'every_line' without any fault: effect '…' arrived" in out


def test_a_known_finding_of_a_fault_that_did_not_run_is_not_called_gone(example, tmp_path):
    known = tmp_path / "known.json"
    known.write_text(json.dumps({"crashgate_baseline": 1, "target": "invoices.crash:adapter", "findings": [
        {"family": "every_line", "fault": "pause-live", "invariant": "drains", "cause": "job '…' is stuck"},
        {"family": "every_line", "fault": "crash", "invariant": "drains", "cause": "job '…' is stuck"}]}))
    result = example.runpytest_subprocess(*PLAN, "--chaos-baseline", str(known))
    result.assert_outcomes(passed=9)
    out = result.stdout.str()
    assert "known findings no longer seen (1), to drop from " in out
    assert "  drains in family 'every_line' [crash]: job '…' is stuck" in out
    assert "[pause-live]" not in out  # no pause ran: the file's pause finding may well still be there


def test_the_baseline_command_writes_the_known_findings_of_a_plans_items(example, tmp_path):
    done = subprocess.run([sys.executable, "-m", "chaos", "baseline", "--plan", "fault_plans/every_line.toml",
                           "--target", "invoices.crash:unsafe_adapter", "--faults", "crash", "--sample", "8"],
                          cwd=str(example.path), capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(example.path), str(REPO)])))
    assert done.returncode == 0, done.stderr
    expected = json.loads(open(_known_file(tmp_path / "by-hand.json", unsafe_line())).read())
    assert json.loads(done.stdout) == expected
    bad = subprocess.run([sys.executable, "-m", "chaos", "baseline", "--plan", "fault_plans/missing.toml"],
                         cwd=str(example.path), capture_output=True, text=True, timeout=600,
                         env=dict(os.environ, PYTHONPATH=os.pathsep.join([str(example.path), str(REPO)])))
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "missing.toml" in bad.stderr
