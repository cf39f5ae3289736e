"""The families that crash the worker on the error paths a busy or full database opens, and on a
step whose attempts run out: they reach the engine's error branches (crash coverage shows it),
the unmodified engine holds at every point of them, a bug planted on each path is caught by the
right invariant, and a store fault that shows nothing is reported as such, never as a pass.

Method: the whole families run in fork mode on the reference engine, on two planted variants
(``tests.quality.variants``) and on tinyflow (``examples/minimal_engine``), an engine of its own.
"""

from __future__ import annotations

import os

import pytest

import engine
from chaos import ReferenceAdapter, run_matrix
from chaos.core.points import Point
from chaos.core.scenario import Outcome
from chaos.core.unreachable import declared_unreachable
from chaos.matrix.runner import MatrixReport, PointResult

from .variants import ERROR_PATHS

FAMILIES = ["extract-outage", "extract-unstorable", "poison-payload", "damaged-payload", "store-busy", "disk-full", "claim-busy",
            "stalled-call", "sender-fail-busy", "cancel-too-late", "sender-busy", "extract-unstorable-text", "extract-not-object",
            "extract-bug", "fetch-too-large", "damaged-memo", "commit-io-error", "claim-io-error", "sender-read-error",
            "heartbeat-busy", "clock-skew", "inline-steps", "slow-call", "extract-unpriced", "slow-timeout", "cancel-unknown",
            "extract-price-missing", "extract-price-text", "extract-price-negative", "extract-price-overflow", "extract-too-deep",
            "extract-astral", "extract-400", "cancel-nul-id", "cancel-half-character-id", "damaged-state", "requeued-after-quarantine",
            "claimable-parked", "hung-call"]
ENGINE = os.path.dirname(os.path.abspath(engine.__file__))


def _line_of(path: str, text: str) -> int:
    with open(path) as source:
        return next(n for n, line in enumerate(source, start=1) if text in line)


@pytest.fixture(scope="module")
def reference_report():
    return run_matrix(ReferenceAdapter(), faults=["crash"], families=FAMILIES, jobs=2)


def test_the_reference_engine_holds_at_every_point_of_the_error_path_families(reference_report):
    report = reference_report
    assert set(report.baselines) == set(FAMILIES) and not report.skipped
    assert report.violations == 0, sorted({str(v) for r in report.results for v in r.outcome.violations})[:5]
    assert {r.family for r in report.results} == set(FAMILIES)
    assert all(r.outcome.exit == "killed" for r in report.results)


def test_the_families_crash_the_worker_on_the_engine_s_error_branches(reference_report):
    killed = reference_report.exercised()
    worker, outbox = os.path.join(ENGINE, "_worker.py"), os.path.join(ENGINE, "_outbox.py")
    human, inputs, reference = os.path.join(ENGINE, "_human.py"), os.path.join(ENGINE, "_inputs.py"), os.path.join(ENGINE, "_reference.py")
    retry, store, sqlstore = os.path.join(ENGINE, "_retry.py"), os.path.join(ENGINE, "_store.py"), os.path.join(ENGINE, "_sqlstore.py")
    lease = os.path.join(ENGINE, "_lease.py")
    expected = {
        # run_once: a claim and a step's commit that met a busy database, one that met a full disk
        (worker, _line_of(worker, "            return RunResult(Outcome.BUSY)")),
        (worker, _line_of(worker, "return RunResult(Outcome.BUSY, claim.job_id, claim.state, ran, skipped)")),
        (worker, _line_of(worker, "return self._store_failed(exc, claim)")),
        # a damaged row is quarantined; an output the store cannot hold fails its step as poison
        (worker, _line_of(worker, "return self._quarantine(claim, str(exc))")),
        (worker, _line_of(worker, "return self._failed(claim, step, ValidationFailed(str(exc))), None, True")),
        # a stalled call's commit is fenced: the job was taken over meanwhile
        (worker, _line_of(worker, "            return Outcome.LEASE_LOST, None\n")),
        # the step whose attempts ran out is parked
        (worker, _line_of(worker, 'f"gave up after {attempts} attempts: {error}"')),
        # the sender's rows that could not be marked stay unsent, a failed one's backoff is lost
        (outbox, _line_of(outbox, "return SendReport(0, failed)")),
        (outbox, _line_of(outbox, "pass  # the row is simply due again at once")),
        # a person's cancel that came too late is refused
        (human, _line_of(human, 'raise IllegalAction(job_id, "cancel", job.state, (PENDING,))')),
        # answers the store cannot hold or the step cannot use, a step's own bug, a document too large
        (inputs, _line_of(inputs, "holds a lone surrogate at {where}")),
        (inputs, _line_of(inputs, "            _check_string(node, what, where)")),
        (reference, _line_of(reference, "extract answer is not a JSON object")),
        (reference, _line_of(reference, "characters; the limit is {DOCUMENT_CHARS_MAX}")),
        (retry, _line_of(retry, "    return False, None")),
        # a damaged memo row is found when the next step loads its inputs
        (store, _line_of(store, "        raise DamagedRow(job_id, what, str(exc), fix) from None")),
        # a COMMIT and a claim that met a disk failing its writes, a sender's read that met one failing its reads
        (sqlstore, _line_of(sqlstore, 'error = store._failure(commit_exc, "COMMIT")')),
        (worker, _line_of(worker, "            return self._store_failed(exc, None)")),
        (outbox, _line_of(outbox, "        return SendReport(0, 0)")),
        # a heartbeat that met a busy database skips its renewal; one that gains too little writes nothing
        (worker, _line_of(worker, "            # The database is locked by another process, or the disk failed: skip this renewal,") + 3),
        (lease, _line_of(lease, "        if until - lease_until < self.lease_s * HEARTBEAT_MIN_EXTENSION_FRACTION:") + 1),
        # a worker whose clock runs ahead took the job: the owner's heartbeat learns it, and its step stops
        (worker, _line_of(worker, "raise LeaseLost(f\"job {self.job_id!r}: lease token {self.token} was taken over")),
        (worker, _line_of(worker, "            return Outcome.LEASE_LOST, None, True")),
        # steps run inline, as a worker configured so runs them
        (worker, _line_of(worker, "            return step.fn(ctx)")),
        # a price that is not a number; a failure that arrived after another worker took the job; a
        # person's cancel of a job that does not exist
        (inputs, _line_of(inputs, 'raise InvalidInput(f"{name}={value!r} must be a finite number")')),
        (worker, _line_of(worker, "            return Outcome.LEASE_LOST\n")),
        (sqlstore, _line_of(sqlstore, "        if not rows:") + 1),
        # prices no ledger can add up: missing, text, negative, past any float
        (inputs, _line_of(inputs, '        return "null"')),
        (inputs, _line_of(inputs, '    return f"a {type(value).__name__}"')),
        (inputs, _line_of(inputs, "must be a number, not {_kind(value)}")),
        (inputs, _line_of(inputs, "is too large; pass a finite number")),
        (inputs, _line_of(inputs, "must be >= {minimum:g}")),
        # an answer nested too deep is refused; one with an emoji takes the full walk and is stored whole
        (inputs, _line_of(inputs, "is nested deeper than {NESTING_DEPTH_MAX} levels")),
        (inputs, _line_of(inputs, "        if not stack:") + 1),
        (inputs, _line_of(inputs, "        return _CANONICAL.encode(value)")),
        # a 400's long body is clipped before it is stored as last_error
        (store, _line_of(store, '    return error[: ERROR_CHARS_MAX - 3] + "..."')),
        # ids no database can store name no job
        (inputs, _line_of(inputs, '    if not isinstance(text, str) or "\\x00" in text:') + 1),
        (inputs, _line_of(inputs, "    except UnicodeEncodeError:\n")),
        (sqlstore, _line_of(sqlstore, "        if not storable_text(job_id):") + 1),
        # a state the table does not know is quarantined; a known one where no step works is released;
        # a requeued job's steps are found in the memo and skipped
        (worker, _line_of(worker, 'return self._quarantine(claim, f"state {claim.state!r} is not a working state')),
        (worker, _line_of(worker, "            to_state = claim.state")),
        (worker, _line_of(worker, "            memos.forget()")),
        # a hung call: the worker's wait ends in real time, the run's clock is past the step's
        # timeout, and the step is given up
        (worker, _line_of(worker, "        except queue.Empty:")),
        (worker, _line_of(worker, "        except queue.Empty:") + 1),
        (worker, _line_of(worker, "            if self.monotonic() - started >= timeout_s:")),
        (worker, _line_of(worker, "                self._runner = None")),
        (worker, _line_of(worker, "                runner.stop()")),
        (worker, _line_of(worker, 'raise StepTimeout(f"step {step.name!r} exceeded its {timeout_s}s timeout")')),
    }
    assert {(f, n) for f, n in expected if n in killed.get(f, set())} == expected


@pytest.mark.parametrize("variant", ERROR_PATHS, ids=lambda v: v.__name__)
def test_a_bug_planted_on_an_error_path_is_caught_with_the_right_invariant(variant):
    adapter = variant()
    report = run_matrix(adapter, faults=["crash"], families=adapter.families)
    found = {v.invariant for r in report.results for v in r.outcome.violations}
    found |= {v.invariant for b in report.baselines.values() for v in b.violations}
    assert report.violations > 0, f"{variant.__name__} was not caught"
    for invariant in variant.catches:
        assert invariant in found, f"{variant.__name__}: expected {invariant}, saw {sorted(found)}"


def test_a_claim_that_takes_a_requeued_job_for_a_fresh_one_is_met_only_by_the_requeue_family():
    from .variants import RequeueRepays

    report = run_matrix(RequeueRepays(), faults=["crash"], families=RequeueRepays.holds_in, jobs=2)
    assert report.points > 0 and report.violations == 0 and not report.skipped


def test_a_store_fault_that_shows_nothing_skips_its_family_saying_why(minimal_engine_path):
    # tinyflow's writes fit in the pages its file already has: a disk full at its current size is
    # never met. The family must say so, not hold; the busy database it does meet, and survives.
    import crash

    report = run_matrix(crash.adapter(), faults=["crash"], families=["disk-full", "store-busy"])
    assert "disk-full" in report.skipped and "showed nothing" in report.skipped["disk-full"]
    assert not [r for r in report.results if r.family == "disk-full"]
    assert [r for r in report.results if r.family == "store-busy"] and report.violations == 0


def _report_with_kill_at(path: str, line: int, executable: set[int]) -> MatrixReport:
    report = MatrixReport("t", "fork", 0, executable={path: executable})
    point = Point(path, line, 1, "f")
    report.results.append(PointResult("clean", point, "", Outcome(point.id, "killed"), ""))
    return report


def test_declared_unreachable_lines_leave_coverage_and_a_killed_one_is_reported(tmp_path):
    path = str(tmp_path / "stepper.py")
    with open(path, "w") as source:
        source.write("def f(x):\n"
                     "    if x < 0:\n"
                     "        raise ValueError(x)  # not a crash point: a bad setting\n"
                     "    return x\n")
    assert declared_unreachable(path) == {3: "a bad setting"}
    honest = _report_with_kill_at(path, 2, {2, 3, 4}).coverage()
    assert (honest["exercised"], honest["lines"], honest["declared_reached"]) == (1, 2, {})
    assert honest["declared"] == {path: {"3": "a bad setting"}} and (honest["all_exercised"], honest["all_lines"]) == (1, 3)
    wrong = _report_with_kill_at(path, 3, {2, 3, 4}).coverage()  # a scenario killed at the declared line after all
    assert wrong["declared_reached"] == {path: [3]}


def test_the_reference_matrix_kills_at_no_line_the_engine_declares_unreachable(reference_report):
    coverage = reference_report.coverage()
    assert coverage["declared_reached"] == {}
    assert sum(len(lines) for lines in coverage["declared"].values()) > 0


def test_the_cli_lists_the_declared_lines_with_their_reasons_when_verbose(capsys):
    from chaos.cli import main

    assert main(["matrix", "--faults", "crash", "--family", "store-busy", "--verbose"]) == 0
    out = capsys.readouterr().out
    assert "more declared unreachable by an iteration" in out
    guard = _line_of(os.path.join(ENGINE, "_worker.py"), "times without reaching its timeout")
    assert f"declared unreachable: engine/_worker.py: {guard}: a bug guard: the step's timeout ends the wait long before" in out


def test_the_io_families_are_skipped_saying_why_where_libfiu_is_missing(monkeypatch, tmp_path):
    from chaos.core import libfiu

    monkeypatch.setenv("PATH", str(tmp_path))  # no fiu-run there: the matrix's own process (a fresh one) finds none either
    report = run_matrix(ReferenceAdapter(), faults=["crash"], families=["commit-io-error", "clean"], jobs=1)
    assert report.skipped == {"commit-io-error": libfiu.MISSING}
    assert "apt-get install fiu-utils" in libfiu.MISSING
    assert {r.family for r in report.results} == {"clean"} and report.violations == 0


def test_an_io_error_fails_only_the_process_that_met_it():
    # The doomed worker's writes fail from the call on; the recovery, in a fresh process, writes
    # again, and every job is delivered: the fault is the machine's, for that process only.
    report = run_matrix(ReferenceAdapter(), faults=["crash"], families=["commit-io-error"], jobs=1)
    baseline = report.baselines["commit-io-error"]
    assert not baseline.violations and not report.skipped
    assert report.results and all(r.outcome.exit == "killed" and not r.outcome.violations for r in report.results)
