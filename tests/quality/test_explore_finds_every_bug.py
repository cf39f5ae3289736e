"""Proof that an exploration looks past its first finding: on an engine with two independent
planted bugs, each caught by its own invariant, ``explore`` reports both, each shrunk; told to
ignore one, it still finds the other, and fails.

Method: ``chaos.machine.explore`` on :class:`NoHeartbeatAndMarkBeforeSend` (the worker never
heartbeats: **bounded-spend**; the sender marks a row sent before it sends it:
**outbox-at-least-once**) with the ``ci`` profile exactly as a project's CI would run it (seed 0),
once as it is and once with ``ignore=["bounded-spend"]`` (up to its first finding, unshrunk), then
the same through the command line.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import Phase

from chaos.machine import explore

from .variants import MarkBeforeSend, NoHeartbeat, NoHeartbeatAndMarkBeforeSend

pytestmark = pytest.mark.slow

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TARGET = "tests.quality.variants:NoHeartbeatAndMarkBeforeSend"
SHRINK_S = 15  # the time all findings of a run may shrink for, together


def test_an_engine_with_two_planted_bugs_gets_both_reported_each_shrunk_and_replayable():
    # Shrinking several distinct findings takes Hypothesis's whole five minutes here: the bound
    # (all findings together) cuts it short, and each finding is reported shrunk as far as it got.
    # What is proven here is that every distinct finding is reported, each with a program that
    # replays it; how far a program shrinks is proven on EffectInStep's golden report
    # (tests/machine/test_histories.py).
    report = explore(NoHeartbeatAndMarkBeforeSend(), profile="ci", shrink_s=SHRINK_S)
    assert not report.passed
    assert set(NoHeartbeat.catches + MarkBeforeSend.catches) <= report.invariants, report.format()
    kinds = [(f.invariant, f.event) for f in report.findings]
    assert len(kinds) == len(set(kinds)), kinds  # each distinct finding once
    for finding in report.findings:
        assert finding.program[0] == "state = NoHeartbeatAndMarkBeforeSendHistories()", finding.format()
        assert finding.program[-1] == "state.teardown()", finding.format()
        assert finding.replay == report.replay and report.replay.endswith(f"--profile ci --seed 0 --shrink-seconds {SHRINK_S}")
        assert f"{finding.invariant}: " in finding.failure
    text = report.format()
    assert f"FAILED, {len(report.findings)} distinct findings" in text
    assert text.count("shrunk program:") == len(report.findings)


def test_ignoring_the_known_finding_still_finds_the_other_and_fails():
    # Up to the first finding not ignored, unshrunk: the histories before it are the whole run's.
    report = explore(NoHeartbeatAndMarkBeforeSend(), profile="ci", ignore=["bounded-spend"], phases=[Phase.explicit, Phase.generate])
    assert not report.passed, report.format()
    assert "outbox-at-least-once" in report.invariants, report.format()
    assert "bounded-spend" not in report.invariants, report.format()
    assert report.ignored["bounded-spend"] > 0
    assert report.replay.endswith("--seed 0 --ignore bounded-spend")
    assert f"ignored: bounded-spend, violated {report.ignored['bounded-spend']} time{'' if report.ignored['bounded-spend'] == 1 else 's'}" in report.format()


def test_the_command_line_prints_every_finding_and_exits_1_also_past_an_ignored_one():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    # A smaller budget than the ci profile's: the no-heartbeat bug shows within a few histories.
    command = [sys.executable, "-m", "chaos", "explore", "--target", TARGET, "--ignore", "outbox-at-least-once", "--max-examples", "30",
               "--shrink-seconds", str(SHRINK_S)]
    out = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ignored: outbox-at-least-once, violated " in out.stdout
    assert "bounded-spend: " in out.stdout and "shrunk program:\n  state = NoHeartbeatAndMarkBeforeSendHistories()" in out.stdout
    assert (f"replay: python -m chaos explore --target {TARGET} --profile ci --seed 0 --max-examples 30 --shrink-seconds {SHRINK_S} "
            "--ignore outbox-at-least-once") in out.stdout
