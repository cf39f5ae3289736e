"""One screen for one cause: a workflow whose every crash point fails for one reason prints the
finding once (its count, the user's line, the fix for that cause, one replay command, the flag that
lists every point), in at most 40 lines, with pytest's default flags and under ``-n 2``; the flag
lists every point, the JUnit XML keeps every item, and the exit code is that of a failed run.

Method: a user's project as a new user writes it from the tutorial, a three-step orders workflow on
``engine/`` (fetch the order, charge the card through the paid model, email a receipt), gated with
a fault plan of hundreds of crash points and a ``crash_matrix`` test, in real forks. Two systemic
bugs: the receipt step sends its email itself, and the charge step reads a module-level dict that
the fetch step filled (a recovering worker never had it).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from chaos.core.findings import fix_for, plain, plural
from chaos.core.invariants import CAUSE_FIXES, FIXES
from chaos.plugin import ALL_FAILURES_FLAG, OPTIONS
from chaos.report import html

SCREEN_LINES_MAX = 40

ORDERS = '''
from engine import Step, StepOutput, Workflow

_FETCHED = {}


def build(model, sender, bug):
    def fetch(ctx):
        order = {"id": ctx.job_id, "total": 12}
        _FETCHED[ctx.job_id] = order
        return StepOutput(order)

    def charge(ctx):
        reply = model.complete(ctx, "charge", "charge the card")
        order = _FETCHED[ctx.job_id] if bug == "state" else ctx.inputs["fetch"]
        return StepOutput({"charged": order["total"]}, cost_usd=reply.cost_usd)

    def receipt(ctx):
        if bug == "send":
            sender.send(ctx.job_id + ":email", "email", {"to": "buyer@example.com"})  # SENT HERE
            return StepOutput({"sent": True})
        return StepOutput({"sent": True}, effects={"email": {"to": "buyer@example.com"}})

    return Workflow("orders", [Step("fetch", fetch), Step("charge", charge), Step("receipt", receipt, effects=("email",))])
'''

GATE = '''
import os

from chaos import ReferenceAdapter

from orders import flow


class SendsItself(ReferenceAdapter):
    name = "orders-send"
    bug = "send"

    def workflow(self, world):
        return flow.build(world.model, world.sender, self.bug)

    def trace_paths(self):
        return super().trace_paths() + [os.path.dirname(os.path.abspath(flow.__file__))]


class ReadsModuleState(SendsItself):
    name = "orders-state"
    bug = "state"
'''

PLAN = '''
lesson = "A crash anywhere in an order's run never loses or doubles a receipt."

[points]
jobs = ["order-1"]
expect = { state = "receipt_done", applied = 1 }
'''

# A sample of the matrix: its failure is one test's text, as long for 30 points as for 600.
MATRIX = '''
import pytest


@pytest.mark.crash_matrix(families=["clean"])
def test_orders_survive_a_crash_at_every_line(crash_matrix):
    assert crash_matrix(points=30).points > 0
'''


def _sent_line() -> int:
    return next(n for n, line in enumerate(ORDERS.splitlines(), 1) if "SENT HERE" in line)


@pytest.fixture
def orders(project: pytest.Pytester) -> pytest.Pytester:
    package = project.mkpydir("orders")
    (package / "flow.py").write_text(ORDERS)
    (package / "gate.py").write_text(GATE)
    project.makepyfile(test_gate=MATRIX)
    (project.path / "fault_plans").mkdir()
    (project.path / "fault_plans" / "orders.toml").write_text(PLAN)
    project.makeini("[pytest]\npythonpath = .\naddopts = -p no:cacheprovider\n")
    return project


def _run(project: pytest.Pytester, target: str, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess("--chaos-target", target, *args)


def _failures_in_junit(xml) -> int:
    return sum(1 for case in ET.parse(xml).getroot().iter("testcase") if case.find("failure") is not None)


def _screen(result: pytest.RunResult) -> list[str]:
    """The lines of a run's terminal but the one that ``--junitxml`` adds (its file's path): what
    the same run prints with pytest's default flags."""
    return [line for line in result.outlines if not re.fullmatch(r"-+ generated xml file: .* -+", line)]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["default", "xdist"])
def test_a_step_that_sends_its_email_itself_fails_the_gate_in_one_screen(orders, workers, tmp_path):
    # The same run writes the JUnit XML: the folded terminal keeps every failed item there (the
    # flag's test below reads it from a run that lists every point).
    xml = tmp_path / "junit.xml"
    result = _run(orders, "orders.gate:SendsItself", *workers, f"--junitxml={xml}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    screen = _screen(result)
    assert len(screen) == len(result.outlines) - 1, "the XML's line is the only one --junitxml adds"
    assert len(screen) <= SCREEN_LINES_MAX, f"{len(screen)} lines:\n{out}"
    failed = int(re.search(r"(\d+) failed", result.outlines[-1]).group(1))
    assert failed > 200  # hundreds of plan items fail alike: every one counted in pytest's last line
    assert _failures_in_junit(xml) == failed
    # The finding, once in the summary: its count, the user's line, the fix for its cause, one replay.
    summary = out[out.index("= crashgate ="):]
    assert re.search(r"^findings: 1 finding in \d+ violated", summary, re.M), summary
    finding = re.search(r"^  outbox-at-least-once \((\d+) points, 2 families without any fault\): .*"
                        rf"\(sent from orders/flow\.py:{_sent_line()}\)$", summary, re.M)
    assert finding and int(finding.group(1)) > 200, summary
    fixes = re.findall(r"^ +fix: (.*)$", out, re.M)
    assert fixes and all(fix == fix_for("outbox-at-least-once", "arrived without a committed outbox row") for fix in fixes)
    assert re.findall(r"^    replay: (.*)$", summary, re.M) == [
        "python -m pytest fault_plans/orders.toml::baseline --chaos-mode fork --chaos-seed 0 --chaos-target orders.gate:SendsItself"]
    assert f"{failed - 1} failed items of fault plans left out" in summary and ALL_FAILURES_FLAG in summary
    # The crash_matrix test leads with the same finding, grouped; pytest's short summary lists it and the
    # plan's first item, its failures section no plan item.
    assert re.search(r"^30 of 30 crash points violated an invariant, and 1 of 1 family already without a crash: 1 finding "
                     rf"\({ALL_FAILURES_FLAG} lists every point\)$", out, re.M), out
    failed_lines = sorted(line.split(" - ")[0] for line in result.outlines if line.startswith("FAILED "))
    assert failed_lines == ["FAILED fault_plans/orders.toml::baseline", "FAILED test_gate.py::test_orders_survive_a_crash_at_every_line"]
    assert "VIOLATED" not in out


@pytest.mark.slow
@pytest.mark.parametrize("args", [("fault_plans/orders.toml",), ("-n", "2")], ids=["plan-alone", "xdist"])
def test_a_step_that_reads_module_state_fails_the_gate_in_one_screen(orders, args):
    result = _run(orders, "orders.gate:ReadsModuleState", *args)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert len(result.outlines) <= SCREEN_LINES_MAX, f"{len(result.outlines)} lines:\n{out}"
    assert int(re.search(r"(\d+) failed", result.outlines[-1]).group(1)) > 100
    summary = out[out.index("= crashgate ="):]
    counts = re.findall(r"^  same-outcome \((\d+) points\): job '[^']+' ended 'failed_charge' \(last_error: \"charge: KeyError",
                        summary, re.M)
    assert len(counts) == 1 and int(counts[0]) > 100, summary
    assert f"    fix: {FIXES['same-outcome']}" in summary
    assert len(re.findall(r"^    replay: python -m pytest ", summary, re.M)) == 1
    # pytest's short summary names the crash_matrix test and one item of the plan's finding.
    failed_lines = [line.split(" - ")[0] for line in result.outlines if line.startswith("FAILED ")]
    plan_lines = [line for line in failed_lines if line.startswith("FAILED fault_plans/orders.toml::")]
    assert len(plan_lines) == 1, failed_lines
    assert len(failed_lines) == (2 if "-n" in args else 1), failed_lines
    assert ALL_FAILURES_FLAG in summary


@pytest.mark.slow
def test_the_flag_lists_every_point_and_the_junit_xml_keeps_every_item(orders, tmp_path):
    xml = tmp_path / "junit.xml"
    result = _run(orders, "orders.gate:SendsItself", ALL_FAILURES_FLAG, f"--junitxml={xml}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    failed = int(re.search(r"(\d+) failed", result.outlines[-1]).group(1))
    out = result.stdout.str()
    plan_failed = [line for line in result.outlines if line.startswith("FAILED fault_plans/orders.toml::")]
    assert len(plan_failed) == failed - 1  # every plan item, in the short summary
    assert out.count("VIOLATED outbox-at-least-once") == failed - 1  # and in the failures section
    summary = out[out.index("= crashgate ="):]
    listed = summary[summary.index("\nviolated:\n"):]
    assert len(re.findall(r"^  fault_plans/orders\.toml::\S+: outbox-at-least-once", listed, re.M)) == failed - 1
    assert len(re.findall(r"^  test_gate\.py::test_orders_survive_a_crash_at_every_line --chaos-points", listed, re.M)) == 30
    matrix_text = out[out.index("30 of 30 crash points"):]
    assert len(re.findall(r"^  test_gate\.py::test_orders_survive_a_crash_at_every_line --chaos-points", matrix_text, re.M)) >= 30
    assert _failures_in_junit(xml) == failed  # the folded terminal's XML: see the one-screen test above


def test_the_flag_is_an_option_like_the_others_and_the_summary_names_it():
    [option] = [o for o in OPTIONS if o.flag == ALL_FAILURES_FLAG]
    assert (option.env, option.ini, option.boolean) == ("CRASHGATE_ALL_FAILURES", "chaos_all_failures", True)
    assert html.ALL_FAILURES_FLAG == ALL_FAILURES_FLAG


def test_the_flag_is_read_from_the_environment_and_the_ini_file_and_a_bad_value_is_named(project, monkeypatch):
    project.makepyfile(test_ok="def test_ok(): pass")
    monkeypatch.setenv("CRASHGATE_ALL_FAILURES", "maybe")
    result = project.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "crashgate all-failures 'maybe' (from environment variable CRASHGATE_ALL_FAILURES) is not allowed" in result.stderr.str()
    monkeypatch.delenv("CRASHGATE_ALL_FAILURES")
    project.makeini("[pytest]\nchaos_all_failures = yes\n")
    assert project.runpytest().ret == pytest.ExitCode.OK


OUTBOX_CAUSES = {
    "sent from the step": "effect 'o-1:email' arrived at the receiver without a committed outbox row (sent from orders.py:20)",
    "marked before sending": "outbox row 'o-1:email' is marked sent but was never delivered",
    "never sent": "outbox row 'o-1:email' was committed but never delivered",
    "strict receiver": "effect 'o-1:email' was applied 2 times at the receiver (job 'o-1', sent from the engine's outbox sender)",
}


def test_the_fix_of_one_cause_holds_no_other_causes_advice_and_no_markup():
    fixes = {cause: fix_for("outbox-at-least-once", detail) for cause, detail in OUTBOX_CAUSES.items()}
    assert len(set(fixes.values())) == len(fixes)  # one fix per cause
    assert "receiver" not in fixes["sent from the step"] and "dedupe" not in fixes["sent from the step"]
    assert "StepOutput(effects=...)" in fixes["sent from the step"]
    assert "StepOutput" not in fixes["strict receiver"] and "dedupes" in fixes["strict receiver"]
    assert "mark the row sent" in fixes["marked before sending"] and "dedupe" not in fixes["marked before sending"]
    # An effect applied twice that the user's step sent is the step's fault, not the receiver's.
    twice_from_step = "effect 'o-1:email' was applied 2 times at the receiver (job 'o-1', sent from orders.py:20)"
    assert fix_for("outbox-at-least-once", twice_from_step) == fixes["sent from the step"]
    texts = [*FIXES.values(), *(fix for causes in CAUSE_FIXES.values() for _, fix in causes)]
    assert not [text for text in texts if "`" in text], "a fix text holds markup"


def test_why_it_matters_is_plain_text_in_the_terminal():
    from chaos.plans.runner import why

    assert "``" not in why("outbox-at-least-once") and 'receiver = "strict"' in why("outbox-at-least-once")
    assert plain("see :func:`chaos.check` and ``x = 1``") == "see chaos.check and x = 1"


def test_counts_are_plural_only_when_they_are_not_one():
    assert [plural(n, "family", "families") for n in (0, 1, 2)] == ["0 families", "1 family", "2 families"]
    assert plural(1, "point") == "1 point"

    def record(nodeid, kind, family):
        return {"nodeid": nodeid, "plan": "p", "kind": kind, "group": family, "family": family, "lesson": "L.", "held": False,
                "violations": [["outbox-at-least-once", f"effect '{nodeid}:email' arrived at the receiver without a committed "
                                                        "outbox row (sent from orders.py:20)"]],
                "failures": [], "wasted": 0, "seconds": 0.0, "replay": f"python -m pytest {nodeid}"}

    one = html.findings_lines([record("a", "baseline", "clean"), record("b", "point", "clean")])
    assert one[0] == "findings: 1 finding in 2 violated points, baselines and scenarios (grouped by invariant and cause, each shown once):"
    assert one[1].startswith("  outbox-at-least-once (1 point, 1 family without any fault): ")
    two = html.findings_lines([record("a", "baseline", "clean"), record("c", "baseline", "sender")])
    assert two[1].startswith("  outbox-at-least-once (2 families without any fault): ")


def test_a_family_without_any_fault_and_its_points_failing_for_one_cause_are_one_finding():
    """They were two: the summary keyed a finding on whether it failed without any fault too."""
    def record(nodeid, kind):
        return {"nodeid": nodeid, "plan": "p", "kind": kind, "group": "clean", "lesson": "L.", "held": False, "failures": [],
                "violations": [["outbox-at-least-once", f"effect '{nodeid}' arrived at the receiver without a committed outbox "
                                                        "row (sent from invoices/unsafe.py:25)"]],
                "wasted": 0, "seconds": 0.0, "replay": "r"}

    lines = html.findings_lines([record("x::baseline", "baseline"), record("x::p1", "point"), record("x::p2", "point")])
    assert lines[0].startswith("findings: 1 finding in 3 violated")
    assert lines[1].startswith("  outbox-at-least-once (2 points, 1 family without any fault): ")
