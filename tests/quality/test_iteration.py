"""An engine whose loop does one step per call (``stepwise_tinyflow``), gated with and without
``iteration = "until-idle"``: only with it does the crash matrix reach the later steps' lines."""

from __future__ import annotations

import os

import pytest

from chaos import run_matrix
from chaos.adapter import capabilities
from types import SimpleNamespace

from chaos.core.iteration import ITERATION_CALLS_MAX, NeverIdle, iteration_model, one_iteration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "minimal_engine")
FAMILIES = ["clean", "sender"]


@pytest.fixture
def stepwise(minimal_engine_path):
    """The test engine's module, importable here and in the matrix's worker processes."""
    from . import stepwise_tinyflow

    return stepwise_tinyflow


def _line(path: str, text: str) -> int:
    with open(path) as f:
        return next(n for n, line in enumerate(f, 1) if text in line)


def _reached(report) -> set[tuple[str, int]]:
    return {(os.path.basename(r.point.file), r.point.line) for r in report.results}


def test_until_idle_reaches_the_later_steps_and_one_call_does_not(stepwise):
    one_call = run_matrix(stepwise.OneCallStepwise(), families=FAMILIES, faults=["crash"], jobs=2)
    until_idle = run_matrix(stepwise.UntilIdleStepwise(), families=FAMILIES, faults=["crash"], jobs=2)
    assert one_call.violations == 0 and until_idle.violations == 0
    assert not [n for n, b in {**one_call.baselines, **until_idle.baselines}.items() if b.violations]
    newsletter, tinyflow = os.path.join(EXAMPLE, "newsletter.py"), os.path.join(EXAMPLE, "tinyflow.py")
    later = {
        ("newsletter.py", _line(newsletter, 'model(call, "review"')),  # the second step's paid call
        ("stepwise_tinyflow.py", _line(stepwise.HERE, "self._move(job_id, state, tinyflow.FINAL")),  # publishing
        ("tinyflow.py", _line(tinyflow, "deliver(f\"{job_id}:{kind}\"")),  # the sender family has a row to send
    }
    assert later <= _reached(until_idle), later - _reached(until_idle)
    assert not later & _reached(one_call), later & _reached(one_call)
    first = ("newsletter.py", _line(newsletter, 'model(call, "draft"'))
    assert first in _reached(one_call) and first in _reached(until_idle)
    assert until_idle.points > 2 * one_call.points, (one_call.points, until_idle.points)
    declared = {type(a).__name__: {s.name: s.line() for s in capabilities(a)}["iteration"]
                for a in (stepwise.OneCallStepwise(), stepwise.UntilIdleStepwise())}
    assert declared["UntilIdleStepwise"] == "  yes  iteration = 'until-idle'"
    assert declared["OneCallStepwise"].startswith("  no   iteration: default: 'one-call'")


def test_a_loop_that_never_goes_idle_is_a_clear_error(stepwise):
    report = run_matrix(stepwise.NeverIdleStepwise(), families=["clean"], faults=["crash"], jobs=1)
    (violation,) = report.baselines["clean"].violations
    assert violation.invariant == "raised" and report.points == 0
    assert f"NeverIdle: adapter 'tinyflow-stepwise' declares iteration = 'until-idle', but run_once made progress on " \
           f"{ITERATION_CALLS_MAX} calls in a row" in str(violation), str(violation)


def test_an_iteration_answers_as_run_once_does_and_a_wrong_word_is_refused():
    class Loop:
        def __init__(self, *words):
            self.words, self.calls = list(words), 0

        def run_once(self):
            self.calls += 1
            return self.words.pop(0)

    class UntilIdle:  # a target as resolve() makes it: the declared word read into its model
        name, iteration = "x", iteration_model(SimpleNamespace(iteration="until-idle"))

    class OneCall:
        name, iteration = "x", iteration_model(object())

    class Typo:
        name, iteration = "x", "until_idle"

    for words, answer, calls in ((("stepped", "done", "idle"), "done", 3), (("idle",), "idle", 1),
                                 (("stepped", "busy"), "busy", 2)):
        loop = Loop(*words)
        assert (one_iteration(UntilIdle(), loop)(), loop.calls) == (answer, calls)
    loop = Loop("stepped", "idle")
    assert (one_iteration(OneCall(), loop)(), loop.calls) == ("stepped", 1)  # the default: one call
    with pytest.raises(ValueError, match="iteration is 'until_idle'; use 'one-call' .* or 'until-idle'"):
        iteration_model(Typo())
    with pytest.raises(NeverIdle):
        one_iteration(UntilIdle(), Loop(*["stepped"] * ITERATION_CALLS_MAX))()
