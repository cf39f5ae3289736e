"""A step that sends its effect itself, declared (``sends_from_steps``): a send fault met inside it
is a fault of that step, so its retry is no finding; undeclared, the harness still reports it as
before; and a step that pays or sends twice without any fault is reported either way.

Method: the help-desk workflow of ``examples/minimal_engine`` (``answer`` drafts a reply with the
paid model, then sends it itself), driven in a sandbox and in random histories with a send fault
armed, declared and undeclared, and with planted bugs (``helpdesk_variants``).
"""

from __future__ import annotations

import tempfile

import pytest

from chaos import Sandbox, run_matrix
from chaos.adapter import capabilities, sending_steps
from chaos.core.invariants import Evidence, bounded_spend
from chaos.core.world import Call, Fault, World
from chaos.histories.events import Arm, Run
from chaos.histories.state_machine import InvariantViolated, machine_for
from engine import FakeClock

TICKET = "ticket-501"
UNEXPLAINED = f"bounded-spend: job '{TICKET}' step 'answer': 2 paid calls, at most 1 allowed (0 interruption(s), 0 faulted call(s)"


@pytest.fixture
def desk(minimal_engine_path):
    import helpdesk_crash

    return helpdesk_crash


@pytest.fixture
def planted(minimal_engine_path):
    from . import helpdesk_variants

    return helpdesk_variants


def _sandboxed(adapter, *faults: Fault) -> tuple[dict[str, str], list[str], int]:
    """The ticket's end, the catalog's violations and its paid calls of ``answer``, after a drain
    with ``faults`` armed."""
    box = Sandbox(adapter, tempfile.mkdtemp(prefix="crashgate-sends-"))
    try:
        box.submit(TICKET, adapter.payload(TICKET))
        for fault in faults:
            box.world.arm(fault)
        box.drain()
        answers = sum(1 for c in box.world.calls() if c.step == "answer")
        return box.states(), [str(v) for v in box.check()], answers
    finally:
        box.close()


def _history(adapter, kind: str) -> str:
    """A history: the ticket submitted, a ``kind`` fault armed for the next send, two runs, then
    drained and checked at rest; "held", or what it found."""
    machine = machine_for(adapter)()
    try:
        machine.start(1)
        machine._step(Arm(kind, "send"))
        machine._step(Run("w1"))
        machine._step(Run("w1"))
        machine._drain_and_check()
        return "held"
    except InvariantViolated as exc:
        return str(exc)
    finally:
        machine.ok = False
        machine.teardown()


@pytest.mark.parametrize("kind", ["connection", "timeout", "server_error", "rate_limit"])
def test_a_send_fault_in_a_declared_step_explains_its_retry_and_undeclared_it_is_reported_as_before(desk, kind):
    declared = _sandboxed(desk.adapter(), Fault(kind, task="send"))
    undeclared = _sandboxed(desk.undeclared(), Fault(kind, task="send"))
    assert declared == ({TICKET: "published"}, [], 2)  # the retry paid again, explained by the fault
    assert undeclared[0] == {TICKET: "published"} and undeclared[2] == 2
    assert [v[: len(UNEXPLAINED)] for v in undeclared[1]] == [UNEXPLAINED]


def test_in_random_histories_a_send_fault_in_a_declared_step_is_that_steps_fault(desk):
    assert _history(desk.adapter(), "connection") == "held"
    assert _history(desk.adapter(), "bad_request") == "held"  # a poison send fails the ticket: the fault's doing
    retried = _history(desk.undeclared(), "connection")
    assert UNEXPLAINED in retried, retried
    failed = _history(desk.undeclared(), "bad_request")
    assert f"same-outcome: job '{TICKET}' ended 'failed'" in failed, failed


def test_a_declared_step_that_pays_twice_is_reported_with_or_without_a_send_fault(planted):
    states, violations, answers = _sandboxed(planted.TwicePaid())
    assert (states, answers) == ({TICKET: "published"}, 2)
    assert [v[:len(UNEXPLAINED)] for v in violations] == [UNEXPLAINED]
    states, violations, answers = _sandboxed(planted.TwicePaid(), Fault("connection", task="send"))
    assert (states, answers) == ({TICKET: "published"}, 4)
    twice = f"bounded-spend: job '{TICKET}' step 'answer': 4 paid calls, at most 2 allowed (0 interruption(s), 1 faulted call(s)"
    assert [v[:len(twice)] for v in violations] == [twice], violations


def test_a_declared_step_that_sends_twice_is_reported_with_or_without_a_send_fault(planted):
    for faults in ((), (Fault("connection", task="send"),)):
        states, violations, _ = _sandboxed(planted.SentTwice(), *faults)
        assert states == {TICKET: "published"}
        assert any(v.startswith(f"outbox-at-least-once: effect '{TICKET}:reply' was applied 2 times") for v in violations), violations


def test_the_crash_matrix_holds_on_the_declared_step_and_finds_the_planted_bug(desk, planted):
    report = run_matrix(desk.adapter(), families=["clean", "sender-fail"], faults=["crash"])
    assert report.points > 0
    assert report.violations == 0, [str(v) for r in report.results for v in r.outcome.violations][:3]
    bug = run_matrix(planted.TwicePaid(), families=["clean"], faults=["crash"])
    found = [str(v) for base in bug.baselines.values() for v in base.violations]
    assert any(v.startswith(UNEXPLAINED) for v in found), found


def test_only_a_transient_send_fault_of_a_declared_kind_under_its_jobs_key_is_a_steps_fault(tmp_path):
    world = World(str(tmp_path), FakeClock(0.0))
    world.sent_by = {"reply": "answer"}
    for key, kind in (("t-1:reply", "reply"), ("t-1:email", "email"), ("reply-for-t-1", "reply"), (":reply", "reply")):
        world.arm(Fault("connection", task="send"))
        with pytest.raises(Exception):
            world.sender.send(key, kind, {})
    assert world.step_send_faults() == [("t-1", "answer", "connection")]  # an outbox sender's kind, or another key: no step's
    calls = [Call(n, "t-1", "answer", "answer", "w", 0, 0.0, False, True, None) for n in (1, 2)]

    def allowed(kind: str) -> list:
        return bounded_spend(Evidence({}, {}, frozenset(), {}, None, calls, [], step_send_faults=[("t-1", "answer", kind)]))

    assert allowed("connection") == []
    assert [v.detail for v in allowed("bad_request")] == [  # a poison send earns no retry
        "job 't-1' step 'answer': 2 paid calls, at most 1 allowed (0 interruption(s), 0 faulted call(s))"]


def test_the_declaration_is_checked_and_listed(desk):
    assert sending_steps(desk.adapter()) == {"reply": "answer"}
    assert sending_steps(desk.undeclared()) == {}
    lines = {type(a).__name__: {s.name: s.line() for s in capabilities(a)}["sends_from_steps"] for a in (desk.adapter(), desk.undeclared())}
    assert lines["HelpdeskAdapter"] == "  yes  sends_from_steps"
    assert lines["UndeclaredHelpdeskAdapter"].startswith("  no   sends_from_steps: default: none (a send fault met inside a step is nobody's")
    wrong = desk.adapter()
    wrong.sends_from_steps = {"reply": ("reply",)}
    with pytest.raises(ValueError, match="sends_from_steps names step 'reply', which is not one of its steps \\('triage', 'answer'\\)"):
        sending_steps(wrong)
    wrong.sends_from_steps = {"triage": "reply", "answer": ("reply",)}
    with pytest.raises(ValueError, match="declares effect 'reply' for steps 'triage' and 'answer'"):
        sending_steps(wrong)
