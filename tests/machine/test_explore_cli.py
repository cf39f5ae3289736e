"""``python -m chaos explore`` from the command line: its exit codes, its report, its replay."""

from __future__ import annotations

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))


def explore(*args):
    return subprocess.run([sys.executable, "-m", "chaos", "explore", *args], capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT)


def test_a_clean_exploration_exits_0_and_says_every_invariant_held():
    out = explore("--max-examples", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("explore chaos:reference_adapter (profile ci, seed 0): ")
    assert out.stdout.rstrip().endswith("every invariant held")


def test_a_violation_exits_1_with_the_shrunk_program_and_a_replay_command_that_reproduces_it():
    # A budget of its own, which the replay command carries: the bug shows in the first histories
    # of seed 0, and a small budget finds few distinct failures to shrink (each shrink replays
    # forked histories: 30 histories cost minutes).
    out = explore("--target", "tests.quality.variants:EffectInStep", "--max-examples", "5")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "shrunk program:\n  state = EffectInStepHistories()" in out.stdout
    assert "outbox-at-least-once" in out.stdout
    replay = next(line for line in out.stdout.splitlines() if line.startswith("replay: ")).split("replay: ", 1)[1]
    assert replay == "python -m chaos explore --target tests.quality.variants:EffectInStep --profile ci --seed 0 --max-examples 5"
    again = subprocess.run(replay.split(), capture_output=True, text=True, timeout=600, env=ENV, cwd=ROOT)
    assert again.returncode == 1
    program = out.stdout.split("shrunk program:")[1].split("\n\n")[0]
    assert program == again.stdout.split("shrunk program:")[1].split("\n\n")[0]


def test_a_target_that_cannot_be_loaded_exits_2_with_one_line():
    out = explore("--target", "no_such_module:adapter")
    assert out.returncode == 2
    assert out.stderr.startswith("error: cannot load target 'no_such_module:adapter'")


def test_an_unknown_invariant_to_ignore_exits_2_with_one_line_naming_it_and_the_valid_names():
    out = explore("--ignore", "bounded-spend", "--ignore", "no-such-invariant", "--max-examples", "1")
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("error: --ignore 'no-such-invariant' is not an invariant random histories check; pass one of: ")
    assert "bounded-spend, memo-stable" in out.stderr and "human-actions" in out.stderr
