"""A family's preparation: its setup, run once into a template, and its doomed iteration recorded.

A family is prepared once, then every one of its points copies what the preparation left. The
setup (the jobs submitted, the family's setup actions) runs in a child forked for it and leaves
the template's files (or an adapter's own template database, on a server); then, in another
child, the doomed iteration runs cleanly under a line recorder, which gives the family's points,
and on to the end without any fault: the baseline every point's outcome is compared with. A
family that cannot apply to the workflow under test (a capability, a schema or a store fault the
adapter cannot offer, a fault no call meets) is skipped, saying why; one whose baseline does not
end as it expects has no points, and its failed baseline says why.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TYPE_CHECKING

from engine import STORE_UNAVAILABLE

from chaos.core.context import is_sqlite, offers, store_conn
from chaos.core.invariants import baseline_failures, raised
from chaos.core.iteration import one_iteration
from chaos.core.points import DurableState, Point, Recorder, crash_classes, pause_classes
from chaos.core.hangs import bound_s
from chaos.core.process import Exit, Hung, fork, watchdog
from chaos.core.raises import RaiseNoter, watch_raises
from chaos.core.target import default_payload
from chaos.adapters.sql import HUMAN_WRITER
from chaos.core import libfiu
from chaos.core.store_faults import DAMAGED_JSON, DAMAGED_STATE, ScenarioDb, small_pages
from chaos.core.scenario import (
    AT_START, DEFAULT_PAYLOAD, T0, Family, Outcome, Run, Scenario, arm_sticky, hung_outcome, poison_for, resolve_states,
    with_jobs_of,
)
from chaos.core.kill import doomed_iteration
from chaos.core.settle import drain
from chaos.core.template import fresh_run
from chaos.core.verdict import checked, steps_in_flight

if TYPE_CHECKING:
    from chaos.core.target import Target

__all__ = ["prepare", "schema_damageable", "NotApplicable", "setup_action", "Recording", "record"]


def prepare(adapter: Target, scenario: Scenario, workdir: str, *, seed: int, deep: bool = True,
            timeout_s: float | None = None) -> Family:
    """Build the scenario's template (in a child), then record the points of its doomed iteration.

    A family whose setup raises, or whose baseline does not end as it expects, comes back with
    no points and a failed baseline saying why (see :attr:`Family.completed`); so does one whose
    setup or baseline does not finish within the bound (``timeout_s``, see :mod:`chaos.core.hangs`),
    with a ``hangs`` violation. Every point of the family is then bounded alike.
    """
    # The jobs it names by position are the adapter's (resolving a resolved scenario changes nothing).
    scenario = with_jobs_of(scenario, adapter)
    started = time.perf_counter()
    try:
        with watchdog(bound_s(adapter.scenario_timeout_s, given=timeout_s)):
            family = _prepare(adapter, scenario, workdir, seed=seed, deep=deep)
    except Hung as hung:
        baseline = hung_outcome(hung, "baseline", "crash", started)
        family = Family(scenario, os.path.join(workdir, "template-" + scenario.name), T0, {}, [], {}, baseline)
    family.timeout_s = timeout_s
    return family


def _prepare(adapter: Target, scenario: Scenario, workdir: str, *, seed: int, deep: bool = True) -> Family:
    template = os.path.join(workdir, "template-" + scenario.name)
    os.makedirs(template, exist_ok=True)
    # An adapter whose databases are not files (PostgreSQL) builds the template database itself.
    server = adapter.server
    run = Run(adapter, template, T0, seed, scenario, server.template_db(template) if server is not None else None)

    not_here = _refused(adapter, scenario)
    if not_here:
        return Family(scenario, template, T0, {}, [], {}, Outcome("baseline", Exit.CLEAN), skipped=not_here)

    poison = poison_for(adapter) if scenario.poison else None

    def setup() -> tuple[dict[str, str], list[str], str]:
        # Where the user's code raises while the family is prepared, noted in the template's
        # ledger, which every run of the family copies: a family whose setup runs the job (the
        # sender's, say) fails without any fault there, and its baseline must still name the line.
        watch_raises(run.world.record_raised)
        # A full disk shows within a write or two only in a database of small pages (see small_pages).
        _create(small_pages(adapter) if "disk_full" in scenario.store_faults() else adapter, run.db)
        session = run.session("w-setup")
        missing = [name for name in scenario.needs() if not offers(adapter, session, name)]
        if missing:
            run.close()
            return {}, missing, ""
        submitted = {}
        for job_id in scenario.jobs:
            payload = poison(job_id) if poison is not None else adapter.payload(job_id)
            session.submit(job_id, payload)
            submitted[job_id] = json.dumps(payload, sort_keys=True)
        arm_sticky(run)  # a sticky fault fails every call alike: the setup's runs meet it too
        for action in scenario.setup:
            try:
                setup_action(run, session, action)
            except NotApplicable as exc:
                run.close()
                return {}, [], str(exc)
            if action.startswith("damage:payload:"):
                submitted.pop(action.split(":")[2], None)  # its payload is gone: submitting it again is no test
        run.close()
        return submitted, [], ""

    family = Family(scenario, template, T0, {}, [], {}, Outcome("baseline", Exit.CLEAN),
                    template_db=run.db if server is not None else "")
    ended = fork(setup, f"the setup of family {scenario.name!r}").wait()
    run.world.close()
    if ended.exit is not Exit.FINISHED:
        family.baseline = Outcome("baseline", Exit.ERROR, error=ended.error,
                                  violations=[raised(f"the setup of family {scenario.name!r}", ended.error or str(ended.exit))])
        return family
    family.submitted, missing, not_applicable = ended.value
    if missing:
        family.skipped = (f"the adapter's session has no {', '.join(m + '()' for m in missing)}: a capability this family "
                          "needs (see chaos.adapter.CAPABILITIES)")
        return family
    if not_applicable:
        family.skipped = not_applicable
        return family
    family.clock_after_setup = run.clock.now()
    recording = record(adapter, family, workdir, seed=seed, deep=deep)
    family.executable, family.baseline = recording.executable, recording.baseline
    skipped = _not_applicable(scenario, family.baseline, recording.struck)
    if skipped:
        # Its fault never met the workflow: the end the family expects presumed it had, so only
        # what the code under test did otherwise (raised, broke an invariant) still counts, and
        # is reported, never skipped.
        family.baseline.violations = [v for v in family.baseline.violations if v.invariant != "baseline"]
        if not family.baseline.violations:
            family.skipped = skipped
            return family
    if not family.completed:
        return family  # no points: a family that does not complete without any fault teaches nothing by crashing
    family.points, family.between = recording.points, recording.between
    family.classes = pause_classes(recording.ops) if recording.ops else list(range(len(recording.points)))
    family.crash_classes = crash_classes(recording.durable) if recording.durable else list(range(len(recording.points)))
    if recording.durable:
        family.crash_contents = {i: recording.contents.get(recording.durable[i]) for i in set(family.crash_classes)}
    return family


def _refused(adapter: Target, scenario: Scenario) -> str:
    """Why ``scenario`` cannot run on ``adapter`` (a poison payload, a schema or a store fault it
    cannot offer), or ""."""
    if scenario.poison and poison_for(adapter) is None:
        return ("it submits a payload your first step refuses, and the adapter has no poison_payload(job_id) "
                "(see chaos.adapter.CAPABILITIES)")
    damages = {a.split(":")[1] for a in scenario.setup if a.startswith("damage:")}
    schema = adapter.schema
    if damages and schema is None:
        return "it damages a stored payload through the adapter's schema, and the adapter declares none (chaos.adapters.sql.SqlSchema)"
    if damages - schema_damageable(schema):
        return (f"it damages a stored {' and a '.join(sorted(damages - schema_damageable(schema)))}, which the engine does not read "
                "from any row the adapter's schema declares damageable (chaos.adapters.rows.JobRows(damage=...))")
    kinds = scenario.store_faults()
    if scenario.needs_libfiu():
        if adapter.server is not None:
            return ("its I/O error fails the worker process's own reads or writes (libfiu), and this adapter's databases "
                    "are on a server, which does its own I/O")
        reason = libfiu.missing()
        if reason:
            return reason
    if "disk_full" in kinds and adapter.server is not None:
        return ("its disk_full fault lowers SQLite's max_page_count on the worker's connection, and this adapter's "
                "databases are on a server")
    if "lock_held" in kinds and adapter.server is not None and adapter.schema is None:
        return "its lock_held fault locks the tables of the adapter's schema on a server, and this adapter declares no schema"
    return ""


def schema_damageable(schema: Any) -> frozenset[str]:
    """What ``schema`` lets the damage faults overwrite: its ``damageable()`` (every schema the
    harness ships has it), else, for a schema written before it, the payload, the state and a memo."""
    if schema is None:
        return frozenset()
    damageable = getattr(schema, "damageable", None)
    return frozenset(damageable()) if callable(damageable) else frozenset({"payload", "state", "memo"})


def _create(adapter: Target, db_path: str) -> None:
    """Create the scenario database, with writer attribution where the adapter offers it."""
    adapter.create(db_path)


class NotApplicable(Exception):
    """A family's setup cannot make its premise on this workflow (a row to damage is not there):
    the family is skipped, saying why."""


def setup_action(run: Run, session: Any, action: str) -> None:
    verb, _, arg = action.partition(":")
    if verb == "run":
        one_iteration(run.adapter, session)()
    elif verb == "send":
        session.send_outbox()
    elif verb == "advance":
        run.clock.advance(float(arg))
    elif verb == "claim":
        doomed = run.session(arg or "w-dead")
        doomed.claim_only()  # the session capability every "claim:" family requires (see Scenario.needs)
        doomed.close()
    elif verb == "requeue":
        try:
            session.requeue(arg)  # a person's requeue (the capability every "requeue:" family requires)
        except run.target.human_errors as exc:
            raise NotApplicable(f"its setup ({', '.join(run.scenario.setup)}) could not requeue job {arg!r} ({exc}): "
                                "the workflow did not park it where the family expects") from None
    elif verb == "damage":
        what, _, rest = arg.partition(":")
        job_id, _, extra = rest.partition(":") if what in ("memo", "state") else (rest, "", "")
        step = extra if what == "memo" else ""
        if what == "memo" and not step:
            step = next(iter(run.adapter.step_states()))  # the workflow's first step, whatever its name
        value = DAMAGED_JSON
        if what == "state":  # a state the table does not know, or one named (<parked>: the workflow's first such)
            named = sorted(resolve_states((extra,), run.adapter)) if extra else [DAMAGED_STATE]
            if not named:
                raise NotApplicable(f"its setup names the state {extra!r}, and the workflow has none")
            value = named[0]
        with ScenarioDb(run.db, writer=HUMAN_WRITER) as conn:  # the audit triggers name the writer: a person
            if run.target.schema.overwrite(conn, job_id, what, value, step=step or None, unaudited=True) is None:
                where = f"memo row of step {step!r}" if what == "memo" else what
                raise NotApplicable(f"its setup ({', '.join(run.scenario.setup)}) left job {job_id!r} with no {where} to damage, "
                                    "so there is no damaged row to crash on")
    else:
        raise ValueError(f"setup action {action!r}: use run, send, advance:<s>, claim:<worker>, requeue:<job>, "
                         "damage:payload:<job>, damage:memo:<job>[:<step>] or damage:state:<job>[:<state>]")


@dataclass
class Recording:
    """What a clean run of the doomed iteration under a line recorder gave."""

    points: list[Point]
    executable: dict[str, frozenset[int]]
    baseline: Outcome
    between: list[bool]
    ops: list[int]  # visible operations finished before each point; [] when they cannot be counted
    durable: list[Any] = field(default_factory=list)  # the durable state at each point; [] when not watched
    struck: bool = True  # the family's store faults showed in the doomed iteration (see _store_fault_showed)
    contents: dict[Any, Any] = field(default_factory=dict)  # a durable state -> what it holds (DurableState.contents)


def record(adapter: Target, family: Family, workdir: str, *, seed: int, deep: bool = True) -> Recording:
    """Run the doomed iteration cleanly under a line recorder, then on to the end without any
    fault, all in one child; return its points and its baseline.

    Besides the points, the recording counts the iteration's visible operations (statements sent
    on any SQLite connection a session opens, the world's ledger writes, clock reads) so that
    points with none between them form one pause class (:func:`chaos.core.points.pause_classes`),
    and notes the durable state at each point (commits to the scenario's SQLite files, the shared
    clock) so that points with no durable change between them form one crash class
    (:func:`chaos.core.points.crash_classes`). Where a session's connection cannot be watched (not
    SQLite), no count is given; where the files cannot be watched, every point is its own class.
    """
    from chaos.core.points import function_lines

    directory = os.path.join(workdir, "baseline-" + family.scenario.name)
    run = fresh_run(adapter, family, directory, seed)

    def body() -> tuple[Any, ...]:
        run.world.conn  # the ledger exists from here on, so that its commits can be watched too
        durable = DurableState(directory, run.db, run.clock)
        # Where the user's code raised, kept in memory while the recorder runs (a ledger write
        # would be one more visible operation and durable change, and move the points' classes),
        # written to the ledger after it; from there on the raises are traced as a recovery's are.
        raised: dict[str, str] = {}
        recorder = Recorder(adapter.trace_paths(), run.only(deep), observe={"durable": durable},
                            on_exception=RaiseNoter(lambda error, where: raised.setdefault(error, where)))
        watched = [True]

        def watch(session: Any) -> None:
            conn = store_conn(session)
            if is_sqlite(conn):
                conn.set_trace_callback(recorder.tick)
            else:
                watched[0] = False

        run.on_session = watch
        iteration = doomed_iteration(run)
        conn = store_conn(run.sessions[0]) if run.sessions else None
        if hasattr(conn, "in_transaction"):
            recorder.watch_transactions(lambda: not conn.in_transaction)
        elif hasattr(getattr(conn, "info", None), "transaction_status"):  # psycopg: 0 is IDLE
            recorder.watch_transactions(lambda: conn.info.transaction_status == 0)
        run.world.conn.set_trace_callback(recorder.tick)
        run.clock.observer = recorder.tick
        try:
            with recorder:
                said = iteration()
        finally:
            run.clock.observer = None
            run.on_session = None
            run.world.conn.set_trace_callback(None)
            if not durable.settled():
                recorder.observed["durable"] = DurableState.unwatched(len(recorder.points))
                durable.contents.clear()
            durable.close()
        executable: dict[str, set[int]] = {}
        for code in recorder.codes:
            executable.setdefault(code.co_filename, set()).update(function_lines(code))
        struck = _store_fault_showed(run, said) if family.scenario.store_faults() else True
        for error, where in raised.items():
            run.world.record_raised(error, where)
        watch_raises(run.world.record_raised)
        # The baseline: the same process goes on to the end, faults stopped, as if nothing happened.
        drained = drain(run, advance=True)
        return (recorder.points, {f: frozenset(lines) for f, lines in executable.items()}, recorder.between,
                recorder.ops if watched[0] else [], recorder.observed["durable"], drained, struck, durable.contents)

    started = time.perf_counter()
    try:
        ended = fork(body, f"the baseline of family {family.scenario.name!r} (its iteration without any fault, then its drain)").wait()
        if ended.exit is not Exit.FINISHED:
            outcome = Outcome("baseline", Exit.ERROR, error=ended.error,
                              violations=[raised(f"the baseline of family {family.scenario.name!r}", ended.error or str(ended.exit))])
            return Recording([], {}, outcome, [], [])
        points, executable, between, ops, durable, drained, struck, contents = ended.value
        outcome = checked(run, family.submitted, Counter(), "baseline", Exit.CLEAN, drained)
        outcome.violations += baseline_failures(family.scenario, adapter, outcome, _payload_hint(adapter, family))
    finally:
        run.close()
    outcome.seconds = time.perf_counter() - started
    return Recording(points, executable, outcome, between, ops, durable, struck, contents)


def _store_fault_showed(run: Run, said: Any) -> bool:
    """Right after a doomed iteration that met a store fault (and answered ``said``): whether the
    fault showed at all, the iteration answering that the store was busy or failed, a step left
    in flight (the fault took its commit) or, for the sender, a row left unsent. A fault that no
    write met (a disk full while nothing needed a new page) shows nothing and teaches nothing.
    (The call that brought it on may be paid for once more: a store fault is one of the
    interrupting faults of ``bounded-spend``.)"""
    if said in STORE_UNAVAILABLE:
        return True
    snapshot = run.adapter.inspect(run.db)
    if run.scenario.phase == "sender":
        return any(row.sent_at is None for row in snapshot.outbox)
    return bool(steps_in_flight(run, snapshot))


def _not_applicable(scenario: Scenario, baseline: Outcome, struck: bool = True) -> str:
    """Why a family does not apply to the workflow under test: a fault armed for a paid call's
    task that no call of the baseline met (the workflow makes no such call), a store fault that
    showed nothing (no write met it), or ""."""
    model_faults = [f for f in scenario.faults if f.task not in (None, "send", AT_START)]  # the sender's and the claim's are not ledgered
    unmet = [f for f in model_faults if f.kind not in baseline.faults_fired]
    if unmet:
        shown = ", ".join(f"{f.kind} on task {f.task!r}" for f in unmet)
        return (f"its fault ({shown}) never fired without a crash: the workflow makes no such call (map the reference's "
                "task names to yours with the adapter's tasks(), see chaos.adapter.CAPABILITIES)")
    if not struck:
        kinds = " and ".join(scenario.store_faults())
        return (f"its {kinds} fault showed nothing: no write of the doomed iteration met it (the call that brings it on "
                "was not made, or a full disk met no write that needed a new page), so there is no error path to crash on")
    return ""


def _payload_hint(adapter: Target, family: Family) -> str:
    """What a failed baseline says about the payloads: what was submitted, and how to change it."""
    sample = next(iter(family.submitted.items()), None)
    shown = f"{sample[1]} for job {sample[0]!r}" if sample else DEFAULT_PAYLOAD
    if adapter.payload is not default_payload:
        return f"the harness submitted {shown}, from your adapter's payload(job_id)"
    return (f"the harness submits {shown} (its default, {DEFAULT_PAYLOAD}); if your steps need other input, "
            "give your adapter a payload(job_id) method that returns it")
