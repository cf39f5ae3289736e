"""``python -m chaos survey``: the reference engine surveyed has no finding, a planted weakness is
reported once with one sentence and a replay command that reproduces it, an engine whose library
is missing is skipped with the install command, and bad input is one line with exit 2."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from chaos.adapter import REFERENCE_TARGET
from chaos.core.invariants import Violation
from chaos.core.findings import fix_for
from chaos.survey import BUDGETS, ENGINES, INSTALL_HINT, EngineSurvey, SurveyedEngine, format_survey, grouped, survey_engine

ROOT = Path(__file__).resolve().parents[2]
RUN_S_MAX = 900  # a small survey takes about a minute on an idle machine; a busy one is allowed far more


def _chaos(*args: str, timeout: float = RUN_S_MAX) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CI": "true"}
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_a_small_survey_of_the_reference_engine_has_no_finding_and_prints_one_json_document():
    """Goal: the reference engine, surveyed the same way as a library, is clean. Method: a small
    survey with --json; stdout is one JSON document even though the runs print warnings."""
    done = _chaos("survey", "--engine", "reference", "--budget", "small", "--json", "-n", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    (engine,) = report["engines"]
    assert (engine["name"], engine["target"], engine["status"]) == ("reference", REFERENCE_TARGET, "surveyed")
    assert engine["scenarios"] >= BUDGETS["small"].sample and engine["histories"] > 0, engine
    assert engine["findings"] == [], engine["findings"]
    assert "survey: reference (1/1): crash matrix" in done.stderr  # the plain progress lines, under CI=true


def test_a_planted_weakness_is_one_finding_with_a_sentence_and_a_replay_that_reproduces_it():
    """Goal: a weakness is reported grouped, said in one sentence, with a command that shows it
    again. Method: survey an engine whose claim ignores a live lease (a paused worker's step is
    paid for twice) with --json (its shrinking makes Hypothesis print a warning, which must not
    reach stdout), then run the finding's replay command: it fails with the same invariant."""
    target = "tests.quality.variants:ClaimIgnoresLiveLease"
    done = _chaos("survey", "--target", target, "--budget", "small", "-n", "2", "--json")
    assert done.returncode == 0, done.stderr[-3000:]
    (engine,) = json.loads(done.stdout)["engines"]
    # The weakness is one finding (its points in several families and faults, grouped); a
    # consequence that a history shows under a busy machine's timing may be another.
    spent = [f for f in engine["findings"] if f["invariant"] == "bounded-spend"]
    assert len(spent) == 1, engine["findings"]
    finding = spent[0]
    assert finding["sentence"].startswith("A step was done twice") and finding["sentence"].endswith("."), finding
    assert finding["sentence"].count(". ") == 0, f"more than one sentence: {finding['sentence']}"
    assert finding["scenarios"] == sum(finding["faults"].values()) > 1 and finding["documented"] is None, finding
    replay = finding["replay"]
    assert replay.startswith(f"python -m chaos matrix --target {target} "), replay
    again = _chaos(*shlex.split(replay)[3:])
    assert again.returncode == 1, again.stdout[-3000:] + again.stderr[-3000:]
    assert "bounded-spend" in again.stdout, again.stdout[-3000:]


def test_an_unknown_engine_is_one_line_naming_the_known_ones_with_exit_2():
    done = _chaos("survey", "--engine", "celery", timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "'celery'" in line and all(name in line for name in ENGINES), line


def test_a_target_that_does_not_load_is_bad_input_with_exit_2():
    done = _chaos("survey", "--target", "no_such_module_here:adapter", timeout=120)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert "no_such_module_here:adapter" in line, line


def test_an_engine_whose_library_is_not_installed_is_skipped_with_the_install_command():
    absent = SurveyedEngine("absent", REFERENCE_TARGET, "crashgate-survey-test-absent-library")
    result = survey_engine(absent, BUDGETS["small"])
    assert (result.status, result.scenarios, result.findings) == ("skipped", 0, [])
    assert INSTALL_HINT in result.reason and "crashgate-survey-test-absent-library" in result.reason
    assert result.to_json()["install"] == INSTALL_HINT
    text = format_survey([result], "small", 0)
    assert f"absent ({REFERENCE_TARGET}): skipped: crashgate-survey-test-absent-library is not installed; {INSTALL_HINT}" in text


def _result(family: str, fault: str, replay: str, *violations: Violation) -> SimpleNamespace:
    return SimpleNamespace(family=family, outcome=SimpleNamespace(fault=fault, violations=list(violations)), fault=fault, replay=replay)


def test_violations_of_one_cause_are_one_finding_counted_once_per_scenario_with_the_shortest_replay():
    """Two scenarios stuck alike (their job ids differ) are one finding of two scenarios, even
    where one scenario reports it twice; the shortest of their replay commands is the one shown."""
    stuck = [Violation("drains", "job 'doc-1' is still 'fetch:working'"), Violation("drains", "job 'doc-2' is still 'fetch:working'")]
    report = SimpleNamespace(target="t:a", seed=0, baselines={"clean": SimpleNamespace(violations=[])}, results=[
        _result("clean", "crash", "python -m chaos matrix --point 'clean::a_long_point_id:L10#1'", *stuck),
        _result("resume", "pause-live", "python -m chaos matrix --point 'resume::p:L1#1'", Violation("drains", "job 'doc-3' is still 'fetch:working'")),
    ])
    (finding,) = grouped(report)
    assert finding.scenarios == 2 and finding.families == {"clean", "resume"}
    assert finding.replay == "python -m chaos matrix --point 'resume::p:L1#1'"
    assert finding.to_json()["sentence"].startswith("A job was lost: it never finished")
    text = format_survey([EngineSurvey("t", "t:a", "", scenarios=2, families=2, findings=[finding])], "small", 0).splitlines()
    assert text[1:] == [
        "t (t:a): 1 finding; 2 scenarios in 2 families, 0 violated; 0 random histories (0 steps); 0.0s",
        "  FINDING 1: drains at 2 scenarios of 2 families [crash 1, pause-live 1]",
        "    what happened: A job was lost: it never finished once the faults stopped and every lease and backoff had passed, "
        "when a worker was killed (SIGKILL) at a line: job 'doc-1' is still 'fetch:working'.",
        "    documented: not known (the survey's registry has no entry for this behaviour)",
        f"    fix: {fix_for('drains', finding.example)}",
        "    replay: python -m chaos matrix --point 'resume::p:L1#1'",
    ]


def test_every_engine_of_the_registry_names_an_adapter_that_loads_and_an_installed_distribution():
    """The registry is the one place that names an engine: each target loads (the test extra
    installs the engines extra's libraries), and each distribution's version can be read."""
    import importlib.metadata

    from chaos.adapter import load_adapter

    for engine in ENGINES.values():
        assert load_adapter(engine.target) is not None, engine
        assert importlib.metadata.version(engine.distribution), engine
        assert all(b.read.startswith("https://") and b.avoid for b in engine.behaviours), engine


def test_hueys_findings_are_its_known_behaviours_each_with_the_page_read_for_it():
    """The messages huey's matrix gives (tests/chaos/test_huey_adapter.py reproduces each without
    the harness) are read as huey's known behaviours: a task lost at its dequeue (documented on
    the consumer page), the rest of a pipeline lost before its next task is enqueued, and a task
    whose result meets a held lock or an I/O error (neither documented)."""
    huey = ENGINES["huey"]
    lost = huey.documented("drains", "job 'doc-1' is still 'fetch:working' after the system drained")
    rest = huey.documented("drains", "job 'doc-1' is still 'extract:done' after the system drained")
    store = [huey.documented("baseline", f"family '{family}' fails without any fault, on every one of its points: job 'doc-1' "
                                         "ended 'extract:working'; every job should end in 'deliver:done'")
             for family in ("store-busy", "commit-io-error")]
    assert lost is not None and lost.documented.startswith("https://huey.readthedocs.io/"), lost
    assert rest is not None and rest is not lost and not rest.documented, rest
    assert store[0] is not None and store[0] is store[1] and not store[0].documented, store
    assert huey.documented("drains", "job 'doc-1' is still 'fetch:ready' after the system drained") is None


def test_litequeues_locked_messages_are_one_known_behaviour_under_every_fault_that_leaves_one():
    """A litequeue message stays locked for good whether its consumer was killed (a crash), a
    family's setup left it dead holding the message, its done() met a held lock or an I/O error,
    or the message was the outbox's (tests/chaos/test_queue_adapters.py reproduces the kill, the
    held lock and the I/O error without the harness): one behaviour, one row on the card."""
    litequeue = ENGINES["litequeue"]
    found = [litequeue.documented("drains", "job 'doc-1' is still 'verify:working' after the system drained"),
             *(litequeue.documented("baseline", f"family '{family}' fails without any fault, on every one of its points: job "
                                                "'doc-1' ended 'fetch:working'; every job should end in 'deliver:done'")
               for family in ("resume", "give-up", "store-busy", "commit-io-error")),
             litequeue.documented("drains", "outbox row 'doc-1:delivery' is still unsent after the system drained")]
    assert all(b is not None for b in found), found
    assert {b.summary for b in found} == {"a message whose consumer died stays locked for good"}, found
    assert litequeue.documented("baseline", "family 'retry-storm' fails without any fault, on every one of its points: job "
                                            "'doc-1' ended 'extract:working'") is None


def test_persistqueues_resumption_at_open_is_read_as_its_known_behaviour_in_the_rows_too():
    """A live consumer that finishes the item another process's opening resumed writes after that
    takeover, and its job moves from the resumed item to the next one it put: persist-queue's
    resumption at open (reproduced without the harness in tests/chaos/test_queue_adapters.py), not
    an illegal move; a message moved back from done to working is not read as it."""
    pq = ENGINES["persist-queue"]
    moved = pq.documented("legal-transitions", "job 'doc-1' moved 'extract:ready' -> 'verify:ready', which is not an edge of the table")
    wrote = pq.documented("fenced-writes", "worker 'w1' wrote state 'None -> verify:ready' to job 'doc-1' after 'sender' had taken it over")
    assert moved is not None and wrote is not None and moved.summary == wrote.summary, (moved, wrote)
    assert pq.documented("legal-transitions", "job 'doc-1' moved 'verify:done' -> 'verify:working'") is None
