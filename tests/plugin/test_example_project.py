"""The example user project (examples/): its gate passes on the pipeline as written, and fails on
the first version of its notify step, which sent the email from inside the step, with an
explanation that points to the outbox."""

from __future__ import annotations

import pytest


def test_the_gate_fails_on_an_email_sent_inside_a_step_and_points_to_the_outbox(example):
    result = example.runpytest_subprocess("--chaos-points", "8", "--chaos-target", "invoices.crash:unsafe_adapter")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "VIOLATED outbox-at-least-once: effect 'inv-1:email' arrived at the receiver without a committed outbox row" in out
    assert "why it matters: Protects against the three outbox mistakes: sending from inside the step" in out
    assert "lesson: A crash anywhere in an invoice's run costs at most one repeated model call and never a lost or doubled email." in out
    assert "FAILED fault_plans/every_line.toml::baseline" in out
    assert "FAILED tests/test_crash_gate.py::test_invoices_survive_a_crash_at_every_line" in out


def test_the_gate_passes_once_the_step_returns_the_email_as_an_outbox_effect(example):
    result = example.runpytest_subprocess("--chaos-points", "8")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert "16 crash points: 16 held, 0 violated;" in result.stdout.str()
