"""Random histories (chaos.machine): each event does what it says, kills in both modes are real,
and a failure is reported, shrunk and replayed exactly.

The goal is that the state machine can be trusted as a gate; the method is to drive it by hand
(``Histories._step``) where a behaviour must be pinned down, and through ``explore`` where the
whole loop (generation, shrinking, the report) is what is under test.
"""

from __future__ import annotations

import os
import unittest

import pytest

from chaos import ReferenceAdapter
from chaos.histories.events import Advance, Arm, Heal, Human, Kill, KillAfterDelivery, KillBeforeDelivery, Machine, Pause, Resume, Run, Send, Submit
from chaos.adapter import load_adapter
from chaos.histories.state_machine import InvariantViolated, machine_for
from chaos.machine import PROFILES, explore, replay_command, state_machine_test
from hypothesis import Phase, settings


def step(machine, event):
    machine._step(event)
    machine.every_invariant_holds_now()
    return machine.log[-1]


def test_a_plain_run_takes_a_job_to_delivered_and_the_history_drains_clean(history):
    machine = history()
    assert step(machine, Run("w1")).endswith(": done")
    assert step(machine, Send()).endswith(": 1 sent")
    machine._drain_and_check()  # raises on any at-rest violation


@pytest.mark.parametrize("mode", ["fork", "inprocess"])
def test_a_kill_lands_on_a_recorded_point_in_both_modes_and_the_job_still_drains(history, mode):
    machine = history()
    line = step(machine, Run("w1", Kill(at=2048, mode=mode)))
    assert "killed at " in line, line
    assert "after durable write" in line
    machine._drain_and_check()
    assert machine.adapter.inspect(machine.env.db).jobs["doc-1"].state == "delivered"


def test_a_forked_doomed_worker_dies_by_sigkill_and_never_returns_into_the_test(history):
    machine = history()
    pid = os.getpid()
    line = step(machine, Run("w1", Kill(at=4095, mode="fork")))
    assert os.getpid() == pid
    assert "killed at " in line


def test_a_kill_mid_step_counts_one_interruption_so_the_re_run_is_allowed(history):
    machine = history()
    machine.world.arm(engine_fault := __import__("chaos").Fault("slow", task="extract"))
    del engine_fault
    # The last segment of the iteration is after the extract call; killing there makes a second
    # worker pay for extract again, which bounded-spend must allow (one interruption).
    step(machine, Run("w1", Kill(at=1400, mode="fork")))
    step(machine, Advance(300))
    step(machine, Run("w2"))
    assert sum(machine.interruptions.values()) >= 1


def test_time_a_forked_worker_spent_in_a_slow_call_has_passed_for_everyone(history):
    machine = history()
    step(machine, Arm("slow", "fetch"))
    before = machine.clock.now()
    line = step(machine, Run("w1", Kill(at=4095, mode="fork")))
    assert "killed" in line or "not reached" in line
    assert machine.clock.now() - before >= 150  # the slow call's 180 s, shared through memory
    assert machine.world.pending_faults() == []  # and the fault it used up is used up here too


def test_the_second_worker_of_a_slow_call_makes_no_slow_call_of_its_own(history):
    # It runs nested inside the first worker's call: a slow call of its own would freeze the first
    # worker past its lease (heartbeats included), a pause nobody asked for, and it would be
    # reported as the first worker's waste. Found by the nightly profile.
    machine = history(jobs=2)
    step(machine, Arm("slow", "extract"))
    step(machine, Arm("slow", "extract"))
    assert step(machine, Run("w1")).endswith(": done")
    assert [f.kind for f in machine.world.pending_faults()] == ["slow"]  # kept for a later call
    machine._drain_and_check()


def test_a_repeated_submit_is_a_no_op_and_a_conflicting_one_is_refused_and_changes_nothing(history):
    machine = history()
    assert step(machine, Submit("doc-1", "plain")).endswith(": a no-op")
    assert step(machine, Submit("doc-1", "revised")).endswith(": refused as a conflict")
    assert step(machine, Submit("doc-2", "revised")).endswith(": created")


def test_illegal_human_actions_are_refused_with_the_engines_error_and_legal_ones_move_the_job(history):
    machine = history()
    line = step(machine, Human("requeue", "doc-1"))
    assert "refused (job 'doc-1' is in state 'pending'; requeue needs one of:" in line
    assert "refused (no job with id 'doc-5'" in step(machine, Human("cancel", "doc-5"))
    step(machine, Submit("doc-2", "poison"))
    step(machine, Run("w1"))  # doc-1 delivered
    step(machine, Run("w1"))  # doc-2's fetch refuses the payload
    assert step(machine, Human("requeue", "doc-2")).endswith(": failed_fetch -> pending")
    assert machine.interruptions[("doc-2", "fetch")] == 1  # the step that runs again may be paid again


class _CancelAnything(ReferenceAdapter):
    """A planted bug: cancel moves any job straight to cancelled (an operator's shortcut)."""

    def open(self, db_path, world, **kw):
        session = super().open(db_path, world, **kw)

        def cancel(job_id):
            with session.store._write() as conn:
                conn.execute("UPDATE job SET state = 'cancelled', next_run_at = NULL WHERE id = ?", (job_id,))

        session.cancel = cancel
        return session


def test_an_illegal_human_action_that_is_accepted_is_reported(history):
    machine = history(_CancelAnything())
    step(machine, Run("w1"))
    with pytest.raises(InvariantViolated) as caught:
        step(machine, Human("cancel", "doc-1"))
    assert "human-actions: cancel 'doc-1' on a job in state 'delivered' was accepted" in str(caught.value)


def test_killing_the_sender_after_a_delivery_re_delivers_and_the_receiver_applies_it_once(history):
    machine = history(jobs=2)
    step(machine, Run("w1"))
    step(machine, Run("w1"))
    assert step(machine, Send(KillAfterDelivery(1, "fork"))).endswith(": killed")
    step(machine, Send())
    keys = [d.key for d in machine.world.deliveries()]
    assert keys.count("doc-1:delivery") == 2 and machine.world.applied_effects()["doc-1:delivery"] == 1
    machine._drain_and_check()


class _StrictReference(ReferenceAdapter):
    receiver = "strict"  # the reference engine sends at least once: declared exactly-once, it is not


def test_with_a_strict_receiver_the_re_delivery_after_a_killed_sender_is_a_violation(history):
    machine = history(_StrictReference(), jobs=2)
    step(machine, Run("w1"))
    step(machine, Run("w1"))
    machine._step(Send(KillAfterDelivery(1, "fork")))
    machine._step(Send())
    assert machine.world.applied_effects()["doc-1:delivery"] == 2
    with pytest.raises(InvariantViolated) as caught:
        machine.every_invariant_holds_now()
    assert "effect 'doc-1:delivery' was applied 2 times at the receiver (job 'doc-1', sent from " in str(caught.value)


def test_killing_the_sender_right_before_a_delivery_leaves_the_row_for_the_next_pass(history):
    machine = history()
    step(machine, Run("w1"))
    assert step(machine, Send(KillBeforeDelivery(1, "inprocess"))).endswith(": killed")
    assert machine.world.deliveries() == []
    assert step(machine, Send()).endswith(": 1 sent")


def test_the_reference_engine_passes_a_short_exploration_with_both_kill_modes():
    report = explore(profile="ci", max_examples=6, stateful_step_count=25)
    assert report.passed, report.format()
    assert report.examples >= 6 and report.rules > 50
    assert report.replay == "python -m chaos explore --target chaos:reference_adapter --profile ci --seed 0 --max-examples 6"


def _line_of(path: str, marker: str) -> int:
    with open(path) as f:
        return next(n for n, line in enumerate(f, 1) if marker in line)


SENT_AT = _line_of(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "quality", "variants.py"),
                   "# BUG: not via the outbox")
GOLDEN = f"""\
shrunk program:
  state = EffectInStepHistories()
  state.start(jobs=1)
  state.every_invariant_holds_now()
  state.step(event=Run(worker='w1', kill=None))
  state.every_invariant_holds_now()
  state.teardown()

InvariantViolated: 1 violation after step 2:
  outbox-at-least-once: effect 'doc-1:delivery' arrived at the receiver without a committed outbox row (sent from tests/quality/variants.py:{SENT_AT})
  outbox-at-least-once holds when: Every committed outbox row is delivered at least once; the receiver applies exactly one effect per key; no effect arrives without a committed outbox row; ``sent_at`` set implies delivered.
what happened:
  1. Submit(job='doc-1', payload='plain'): created
  2. Run(worker='w1', kill=None): done
replay: python -m chaos explore --target tests.quality.variants:EffectInStep --profile ci --seed 0"""


def _without_timing(text):
    head, _, rest = text.partition("\n")
    return head.split(": ", 1)[0] + ": FAILED\n" + rest


def test_a_failure_prints_the_shrunk_program_what_happened_and_the_replay_command_golden():
    report = explore("tests.quality.variants:EffectInStep", profile="ci", report_multiple_bugs=False)
    assert not report.passed
    by_a_run = next(f for f in report.findings if (f.invariant, f.event) == ("outbox-at-least-once", "Run"))
    assert by_a_run.format() == GOLDEN
    text = report.format()
    assert _without_timing(text).startswith("explore tests.quality.variants:EffectInStep (profile ci, seed 0): FAILED\n")
    assert "\n\n" + GOLDEN + "\n" in text + "\n"
    assert text.count("shrunk program:") == len(report.findings)


def test_the_same_seed_explores_and_shrinks_to_the_same_program():
    first = explore("tests.quality.variants:EffectInStep", profile="ci", seed=3, report_multiple_bugs=False)
    again = explore("tests.quality.variants:EffectInStep", profile="ci", seed=3, report_multiple_bugs=False)
    assert (first.rules, first.examples, first.program) == (again.rules, again.examples, again.program)
    assert first.replay == replay_command("tests.quality.variants:EffectInStep", "ci", 3)


def test_a_failure_found_through_fork_kills_is_found_again_identically_from_its_seed():
    # Without shrinking (Hypothesis's own business, given a deterministic test): the histories,
    # the kills in forked children and the failure they lead to are the same on every run.
    first = explore("tests.quality.variants:ReleaseInFinally", profile="ci", phases=[Phase.generate])
    again = explore("tests.quality.variants:ReleaseInFinally", profile="ci", phases=[Phase.generate])
    assert not first.passed and "mode='fork'" in "\n".join(first.program)
    assert (first.rules, first.examples, first.program, first.failure) == (again.rules, again.examples, again.program, again.failure)


def test_the_factory_returns_a_test_case_that_passes_for_the_reference_engine():
    case = state_machine_test("chaos:reference_adapter", profile="ci", max_examples=3, stateful_step_count=10)
    assert issubclass(case, unittest.TestCase)
    result = unittest.TestResult()
    case().run(result)
    assert result.wasSuccessful(), result.failures + result.errors


def test_the_factory_test_fails_with_the_program_and_the_replay_command_for_a_planted_bug():
    case = state_machine_test("tests.quality.variants:EffectInStep", profile="ci", report_multiple_bugs=False)
    with pytest.raises(InvariantViolated) as caught:
        case().runTest()
    notes = "\n".join(getattr(caught.value, "__notes__", []))
    assert "state.step(event=Run(worker='w1', kill=None))" in notes
    assert "replay: python -m chaos explore --target tests.quality.variants:EffectInStep --profile ci --seed 0" in str(caught.value)


def test_the_seed_comes_from_the_argument_then_at_seed_on_the_class_then_hypothesis_seed_then_the_profile(monkeypatch):
    import hypothesis

    seen = []
    monkeypatch.setattr("chaos.machine._explore", lambda target, profile, seed, modes, overrides, ignore=(), shrink_s=None: (seen.append(seed), (None, None))[1])
    state_machine_test(seed=7)().runTest()
    hypothesis.seed(11)(case := state_machine_test())
    case().runTest()
    assert seen == [7, 11]
    from chaos.machine import _seed

    monkeypatch.setattr(hypothesis.core, "global_force_seed", 13)
    assert (_seed("ci", None), _seed("ci", 5)) == (13, 5)
    monkeypatch.setattr(hypothesis.core, "global_force_seed", None)
    assert _seed("ci", None) == 0


def test_profiles_ci_is_small_nightly_runs_at_least_100000_steps_and_both_are_registered_without_a_database():
    ci, nightly = PROFILES["ci"], PROFILES["nightly"]
    assert ci.max_examples * ci.stateful_step_count <= 5_000
    assert nightly.max_examples * nightly.stateful_step_count >= 100_000
    for name, profile in PROFILES.items():
        assert profile.database is None
        assert settings.get_profile(f"crashgate-{name}") is profile


def test_an_unknown_profile_or_kill_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="profile 'weekly' is not one of: ci, nightly"):
        explore(profile="weekly")
    with pytest.raises(ValueError, match="must be a non-empty selection of: fork, inprocess"):
        machine_for(ReferenceAdapter(), modes=("thread",))


# -- frozen workers ---------------------------------------------------------------------------------
MID_EXTRACT = 1500  # a pause point of the first iteration inside the extract step, lease held


def _process_state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_a_pause_freezes_a_real_process_holding_its_lease_and_a_resume_lets_it_finish(history):
    machine = history()
    line = step(machine, Pause("w1", MID_EXTRACT))
    assert "frozen at " in line, line
    frozen = machine.frozen["w1"]
    assert _process_state(frozen.pid) == "T"  # stopped by SIGSTOP, still holding its lease
    assert [(job, state) for job, state, _, _ in frozen.leases] == [("doc-1", "extracting")]
    assert step(machine, Run("w1")).endswith("ignored: w1 is frozen")
    assert step(machine, Run("w2")).endswith(": idle")  # the lease is valid: nothing to take
    assert "woke at " in step(machine, Resume("w1")) and "finished its iteration" in machine.log[-1]
    assert machine.frozen == {}
    assert machine.adapter.inspect(machine.env.db).jobs["doc-1"].state == "delivered"
    machine._drain_and_check()


def test_a_frozen_workers_expired_lease_counts_one_interruption_and_its_fenced_writes_are_refused(history):
    machine = history()
    step(machine, Pause("w1", MID_EXTRACT))
    step(machine, Advance(300))  # past the frozen worker's lease
    assert sum(machine.interruptions.values()) == 1
    assert step(machine, Run("w2")).endswith(": done")  # takes the job over and finishes it
    step(machine, Resume("w1"))  # wakes to a lost lease: may pay once more, commits nothing
    machine._drain_and_check()
    calls = [c for c in machine.world.calls() if c.step == "extract"]
    assert len(calls) <= 2


def test_a_worker_frozen_in_a_write_transaction_makes_the_others_back_off_as_busy(history):
    # Find a point inside a write transaction: the other worker's claim must come back busy.
    for at in range(0, 4096, 61):
        machine = history(jobs=2)
        if "frozen at " in step(machine, Pause("w1", at)) and step(machine, Run("w2")).endswith(": busy"):
            break
    else:
        pytest.fail("no pause point held the write lock")
    assert "refused, the database unavailable" in step(machine, Submit("doc-3"))  # changes nothing, says so
    assert "stayed locked for 0.05s" in machine.log[-1]
    step(machine, Resume("w1"))
    machine._drain_and_check()


def test_a_history_ends_with_frozen_workers_woken_and_a_failed_one_leaves_no_stopped_process(history):
    machine = history()
    step(machine, Pause("w1", MID_EXTRACT))
    machine.teardown()  # wakes w1, drains, checks at rest
    assert machine.frozen == {} and any("at the end: woke at" in line for line in machine.log)
    failed = history()
    step(failed, Pause("w1", MID_EXTRACT))
    pid = failed.frozen["w1"].pid
    failed.ok = False
    failed.teardown()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped, not left stopped


def test_a_claim_that_ignores_a_live_lease_is_caught_by_a_history_with_a_frozen_worker(history):
    program = [Pause("w1", MID_EXTRACT), Run("w2"), Resume("w1")]
    clean = history()
    for event in program:
        step(clean, event)
    clean._drain_and_check()
    buggy = history(load_adapter("tests.quality.variants:ClaimIgnoresLiveLease"))
    with pytest.raises(InvariantViolated) as caught:
        for event in program:
            step(buggy, event)
        buggy._drain_and_check()
    assert "bounded-spend" in {v.invariant for v in caught.value.violations}, str(caught.value)


def test_pauses_are_drawn_only_when_kills_may_fork():
    from chaos.histories.events import events

    inprocess = events(["inprocess"])
    with_fork = events(["fork", "inprocess"])
    assert "Pause" not in repr(inprocess) and "Pause" in repr(with_fork)


# -- faults of the machine --------------------------------------------------------------------------
def test_a_full_disk_makes_a_worker_back_off_as_unavailable_and_a_heal_lets_work_resume(history):
    machine = history(jobs=2)
    assert "the disk is full at" in step(machine, Machine("disk-full"))
    before = machine.adapter.inspect(machine.env.db)
    outcomes = [step(machine, Run("w1")).rsplit(": ", 1)[1] for _ in range(3)]
    assert "unavailable" in outcomes, outcomes  # SQLITE_FULL: back off, not a crash
    assert set(before.jobs) == set(machine.adapter.inspect(machine.env.db).jobs)  # nothing lost
    assert step(machine, Heal()).endswith("space freed")
    step(machine, Advance(300))
    machine._drain_and_check()  # every job delivered, nothing paid for beyond the lost steps


def test_a_held_write_lock_makes_the_workers_back_off_as_busy_until_it_is_released(history):
    machine = history()
    assert step(machine, Machine("lock-held")).endswith("another connection holds the write lock")
    assert step(machine, Run("w1")).endswith(": busy")
    assert step(machine, Heal()).endswith("lock released")
    assert step(machine, Run("w1")).endswith(": done")
    machine._drain_and_check()


def test_a_clock_stepped_back_delays_the_outbox_but_never_strands_it(history):
    machine = history()
    step(machine, Run("w1"))
    assert "stepped back 3600 s" in step(machine, Machine("clock-back"))
    assert step(machine, Send()).endswith(": 0 sent")  # its row is due an hour from now
    machine._drain_and_check()  # time passes the row too: delivered once
    assert machine.world.applied_effects() == {"doc-1:delivery": 1}


def test_a_worker_frozen_while_the_disk_was_full_wakes_to_the_space_freed_meanwhile(history):
    machine = history()
    step(machine, Machine("disk-full"))
    assert "frozen at _worker.run_once" in step(machine, Pause("w1", 0))  # before its claim
    step(machine, Heal())
    assert "finished its iteration" in step(machine, Resume("w1"))
    # It committed its steps after waking: the limit it was forked with was lifted when it woke.
    assert machine.adapter.inspect(machine.env.db).jobs["doc-1"].state == "delivered"
    machine._drain_and_check()


# -- distinct findings, ignored invariants, flaky failures ---------------------------------------
def test_each_invariant_and_kind_of_event_raises_its_own_class_so_hypothesis_tells_them_apart(history):
    from chaos.histories.state_machine import violated

    machine = history(_CancelAnything())
    step(machine, Run("w1"))
    with pytest.raises(InvariantViolated) as caught:
        step(machine, Human("cancel", "doc-1"))
    assert type(caught.value) is violated("human-actions", "Human")
    assert type(caught.value).__name__ == "InvariantViolated"  # the report reads as before
    assert violated("human-actions", "Human") is not violated("human-actions", "Run")


def test_an_ignored_invariant_is_counted_and_the_history_goes_on():
    machine = machine_for(_CancelAnything(), ignore=["human-actions"])()
    try:
        machine.start(1)
        step(machine, Run("w1"))
        machine._step(Human("cancel", "doc-1"))  # the check after it would see the move, unignored
        assert machine.log[-1].endswith("accepted on a job in state 'delivered' (ignored)")
        assert machine.ignored["human-actions"] == 1
    finally:
        machine.ok = False
        machine.teardown()


def test_an_unknown_invariant_to_ignore_is_refused_with_the_valid_names():
    with pytest.raises(ValueError, match="'bounded-spent' is not an invariant random histories check; pass one of: legal-transitions, "):
        explore(ignore=["bounded-spent"])
    with pytest.raises(ValueError, match="ignore 'nope': not an invariant random histories check"):
        machine_for(ReferenceAdapter(), ignore=["nope"])


def test_a_flaky_failure_prints_the_program_that_ran_and_the_violation_that_was_seen():
    from hypothesis.errors import FlakyFailure

    from chaos.core.invariants import Violation
    from chaos.histories.state_machine import violated
    from chaos.machine import ExploreReport, _findings

    seen = violated("bounded-spend", "Run")([Violation("bounded-spend", "step 'extract' of 'doc-1' paid 2 times")], "after step 2", ["1. Submit(job='doc-1', payload='plain'): created", "2. Run(worker='w1', kill=None): done"], "")
    flaky = FlakyFailure("Inconsistent results: An example failed on the first run but now succeeds.", [seen])
    report = ExploreReport("t:a", "ci", 0, findings=_findings(flaky, "python -m chaos explore --target t:a --profile ci --seed 0"))
    text = report.format()
    assert "(not printed)" not in text
    assert "program (flaky: it failed, then passed when run again; as it ran when it failed):\n  1. Submit(job='doc-1', payload='plain'): created\n  2. Run(" in text
    assert "what was seen when it failed:\nInvariantViolated: 1 violation after step 2:\n  bounded-spend: step 'extract' of 'doc-1' paid 2 times" in text
    assert report.invariants == {"bounded-spend"} and report.findings[0].flaky
    assert text.endswith("replay: python -m chaos explore --target t:a --profile ci --seed 0")


# -- an adapter's own poison payload and states for a person's actions ----------------------------
def test_a_poison_submit_sends_the_adapters_own_refused_payload_and_the_history_ends_clean(history):
    from tests.quality.user_workflows import NotesAdapter

    class PoisonNotes(NotesAdapter):
        def poison_payload(self, job_id):
            return {"text": ""}  # the notes' first step refuses an empty note

    machine = history(PoisonNotes())
    step(machine, Submit("doc-2", "poison"))
    assert machine.submitted["doc-2"] == '{"text": ""}'
    assert '{"text": ""}' in machine.refused_payloads  # its outcome is its own, not compared
    step(machine, Run("w1"))  # doc-1, submitted at the start
    step(machine, Run("w1"))
    state = machine.adapter.inspect(machine.env.db).jobs["doc-2"].state
    assert state in machine.failed_states, state
    assert machine._legal("requeue", state)
    machine._drain_and_check()


def test_a_persons_actions_are_legal_in_the_adapters_own_states(history):
    machine = history()
    assert machine._legal("cancel", "pending") and machine._legal("resolve", "needs_human")
    assert not machine._legal("cancel", "needs_human") and not machine._legal("resolve", "pending")

    class Renamed(ReferenceAdapter):
        def initial_states(self):
            return {"pending"}

        def needs_human_states(self):
            return {"failed_verify"}  # a person settles a failed verification here

    renamed = history(Renamed())
    assert renamed._legal("resolve", "failed_verify") and not renamed._legal("resolve", "needs_human")
    assert "failed_verify" not in renamed.failed_states


def test_a_shrink_budget_bounds_hypothesiss_shrinking_while_it_runs_and_is_in_the_replay_command():
    from hypothesis.internal.conjecture import engine as conjecture

    from chaos.machine import _shrinking_for

    default = conjecture.MAX_SHRINKING_SECONDS
    with _shrinking_for(7):
        assert conjecture.MAX_SHRINKING_SECONDS == 7  # read by Hypothesis when shrinking starts
    assert conjecture.MAX_SHRINKING_SECONDS == default
    with _shrinking_for(None):
        assert conjecture.MAX_SHRINKING_SECONDS == default
    report = explore(profile="ci", max_examples=2, stateful_step_count=5, shrink_s=7)
    assert report.replay.endswith("--seed 0 --max-examples 2 --shrink-seconds 7")
    with pytest.raises(ValueError, match="shrink time 0 must be a positive number of seconds"):
        explore(shrink_s=0)
