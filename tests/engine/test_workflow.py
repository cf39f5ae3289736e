"""The state table is data, derived from the list of steps, and checked on every move."""

import json
import subprocess
import sys

import pytest

from engine import REFERENCE_STATES, IllegalTransition, InvalidInput, NeedsHuman, Step, Workflow

DESIGN_TABLE = {
    "pending": ["fetching", "cancelled"],
    "fetching": ["fetched", "failed_fetch", "pending"],
    "fetched": ["extracting"],
    "extracting": ["extracted", "failed_extract", "fetched"],
    "extracted": ["verifying"],
    "verifying": ["verified", "needs_human", "extracted"],
    "verified": ["delivering"],
    "delivering": ["delivered", "failed_deliver", "verified"],
    "delivered": [],
    "needs_human": ["extracted", "cancelled"],
    "cancelled": [],
    "failed_fetch": ["pending"],
    "failed_extract": ["fetched"],
    "failed_deliver": ["verified"],
}


def test_reference_workflow_derives_exactly_the_design_table(workflow):
    assert workflow.to_json() == DESIGN_TABLE
    assert {k: list(v) for k, v in REFERENCE_STATES.items()} == DESIGN_TABLE


def test_states_cli_prints_the_table_as_json():
    out = subprocess.run([sys.executable, "-m", "engine", "states", "--json"], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == DESIGN_TABLE


def test_every_working_state_has_a_retry_edge_back_to_the_state_before_it(workflow):
    for step in workflow.steps:
        assert workflow.before(step) in workflow.table[step.working_state]


def test_a_custom_workflow_derives_its_table_from_its_steps():
    wf = Workflow("two", [Step("a", lambda c: 1), Step("b", lambda c: NeedsHuman("x"), review=True)])
    assert wf.to_json() == {
        "pending": ["a_running", "cancelled"],
        "a_running": ["a_done", "failed_a", "pending"],
        "a_done": ["b_running"],
        "b_running": ["b_done", "needs_human", "a_done"],
        "b_done": [],
        "needs_human": ["a_done", "cancelled"],
        "cancelled": [],
        "failed_a": ["pending"],
    }


def test_an_illegal_move_names_both_states_and_what_is_allowed(workflow):
    with pytest.raises(IllegalTransition, match="'pending' -> 'delivered'.*fetching, cancelled"):
        workflow.check("pending", "delivered")
    with pytest.raises(IllegalTransition, match="terminal"):
        workflow.check("delivered", "pending")


def test_a_move_from_an_unknown_state_is_illegal(workflow):
    with pytest.raises(IllegalTransition, match="'bogus'"):
        workflow.check("bogus", "pending")


@pytest.mark.parametrize(
    "steps, message",
    [
        ([], "has no steps"),
        ([Step("A", lambda c: 1)], "must match"),
        ([Step("a", lambda c: 1), Step("b", lambda c: 1, working="a_running")], "used twice"),
        ([Step("a", lambda c: 1, review=True), Step("b", lambda c: 1, review=True)], "more than one review step"),
        # A job's effect is keyed <job id>:<kind>: the second step's "email" would be dropped as a duplicate.
        ([Step("a", lambda c: 1, effects=("email",)), Step("b", lambda c: 1, effects=("email",))],
         "effect kind 'email' is declared by steps 'a' and 'b'"),
        ([Step("a", lambda c: 1, effects="email")], r"must be a tuple of effect kinds.*effects=\('email',\)"),
        ([Step("a", lambda c: 1, effects=("",))], "must be a tuple of effect kinds"),
    ],
)
def test_malformed_workflows_are_refused_with_the_reason(steps, message):
    with pytest.raises(InvalidInput, match=message):
        Workflow("bad", steps)
