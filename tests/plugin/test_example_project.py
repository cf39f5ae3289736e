"""The example user project (examples/): its gate passes on the pipeline as written, and fails on
the first version of its notify step, which sent the email from inside the step, with an
explanation that points to the outbox."""

from __future__ import annotations

import re

import pytest


def test_the_gate_fails_on_an_email_sent_inside_a_step_and_points_to_the_outbox(example):
    result = example.runpytest_subprocess("--chaos-points", "8", "--chaos-target", "invoices.crash:unsafe_adapter")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    # One finding, in the crash_matrix test's failure and in the summary, the plan's items folded into it.
    sent = "arrived at the receiver without a committed outbox row (sent from invoices/unsafe.py:"
    assert re.search(rf"^outbox-at-least-once \(8 points, 2 families without any fault\): effect 'inv-2024-001:email' {re.escape(sent)}", out, re.M)
    assert re.search(rf"^  outbox-at-least-once \(16 points, 3 families without any fault, 1 scenario\): effect '[^']+' {re.escape(sent)}", out, re.M)
    assert "why it matters: Protects against the three outbox mistakes: sending from inside the step" in out
    assert "fix: the step sent the effect itself" in out and "dedupe" not in out.split("fix: ", 1)[1].split("\n")[0]
    assert "FAILED tests/test_crash_gate.py::test_invoices_survive_a_crash_at_every_line" in out
    assert "FAILED fault_plans/every_line.toml::baseline" in out  # the plan's first item of the finding
    assert len(re.findall(r"^FAILED fault_plans/every_line\.toml::", out, re.M)) == 1
    # Every item, with its plan's lesson, one flag away.
    every = example.runpytest_subprocess("--chaos-points", "8", "--chaos-target", "invoices.crash:unsafe_adapter",
                                         "--chaos-all-failures", "fault_plans/every_line.toml")
    out = every.stdout.str()
    assert "VIOLATED outbox-at-least-once: effect 'inv-2024-001:email' arrived at the receiver without a committed outbox row" in out
    assert "lesson: A crash anywhere in an invoice's run costs at most one repeated model call and never a lost or doubled email." in out


def test_the_gate_passes_once_the_step_returns_the_email_as_an_outbox_effect(example):
    result = example.runpytest_subprocess("--chaos-points", "8")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "16 crash points: 16 held, 0 violated;" in result.stdout.str()
