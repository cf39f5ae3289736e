"""Proof that random histories find real bugs: every planted variant that a crash can reveal is
found by the state machine's ``ci`` profile, by the right invariant, with the program that
revealed it; the unmodified engine passes the same profile.

Method: ``chaos.machine.explore`` on each variant with the ``ci`` profile exactly as a project's
CI would run it (seed 0: the same histories on every run), up to its first finding and without
shrinking it (``phases=[explicit, generate]``): the histories up to it, and so the finding, are
the ones a whole run meets first. Shrinking is Hypothesis's work and costs minutes a variant (a
shrink step replays forked histories); it is proven on ``EffectInStep``'s golden report
(``tests/machine/test_histories.py``) and on the engine with two bugs, where a run also goes on
past its first finding (``test_explore_finds_every_bug.py``). ``ReleaseInFinally`` is only visible to
a real process stopped in its tracks (a ``finally`` that an exception would run), so its finding
must come from a fork-mode kill or a frozen process. ``NoJitter`` (a backoff without jitter) needs a
herd: its finding comes from a ``Storm``. Of the overlap variants, see
``tests/machine/test_histories.py`` and the pause matrix.
"""

from __future__ import annotations

import pytest
from hypothesis import Phase

from chaos import ReferenceAdapter
from chaos.machine import explore

from .variants import PLANTED, TIMING, ReleaseInFinally

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("variant", PLANTED + TIMING + (ReleaseInFinally,), ids=lambda v: v.__name__)
def test_the_ci_profile_finds_each_planted_bug_with_the_right_invariant(variant):
    report = explore(variant(), profile="ci", phases=[Phase.explicit, Phase.generate])
    assert not report.passed, f"{variant.__name__} was not found:\n{report.format()}"
    assert set(variant.catches) <= report.invariants, report.format()
    assert report.program[0] == f"state = {variant.__name__}Histories()"
    assert report.program[-1] == "state.teardown()"
    if variant is ReleaseInFinally:  # a real process stopped (SIGKILL, or SIGSTOP): no finally ran
        assert "mode='fork'" in report.failure or "Pause(" in report.failure, report.format()
    if variant in TIMING:  # only a storm's herd reveals it
        assert ("retry-spread", "Storm") in {(f.invariant, f.event) for f in report.findings}, report.format()


def test_the_unmodified_engine_passes_the_ci_profile():
    report = explore(ReferenceAdapter(), profile="ci")
    assert report.passed, report.format()
    assert report.rules >= 2_500
