"""``python -m chaos survey``: the crash matrix and random histories of each engine a team may run
on, its findings grouped by invariant and cause, each said in one sentence, with the shortest
command that replays it and whether the library documents the behaviour.

The registry (:data:`ENGINES`) is the one place that names a surveyed engine: its adapter, the
distribution its version is read from, and per known behaviour the page of the library's
documentation that was read for it. A finding on a library is what the survey is for, not an error
of the run: the command exits 0 when every engine was surveyed (or skipped, its library not being
installed), 1 when an engine's survey could not run, 2 on bad input.

>>> list(ENGINES)[0], ENGINES["reference"].target
('reference', 'chaos:reference_adapter')
>>> sentence("drains", "crash", "job 'doc-1' is still 'fetch:working'")
"A job was lost: it never finished once the faults stopped and every lease and backoff had passed, when a worker was killed (SIGKILL) at a line: job 'doc-1' is still 'fetch:working'."
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import re
import shlex
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from chaos.adapter import REFERENCE_TARGET
from chaos.core.findings import fix_for, group_key, normalise, plural

__all__ = ["Behaviour", "SurveyedEngine", "ENGINES", "INSTALL_HINT", "BUDGETS", "Budget", "SurveyFinding", "EngineSurvey",
           "known_engines", "engines_named", "survey_engine", "grouped", "sentence", "format_survey", "run_cli", "SURVEY_FORMAT"]

INSTALL_HINT = "pip install 'crashgate[engines]'"
SURVEY_FORMAT = 1
EXAMPLE_CHARS_MAX = 240


@dataclass(frozen=True)
class Behaviour:
    """A behaviour of a library that a survey may find, and what its documentation says of it.

    ``cause`` is a regular expression searched in a finding's detail; ``documented`` the link
    where the library documents the behaviour ("" where it does not); ``read`` the page that was
    read to say so; ``avoid`` how a team avoids it with that library; ``summary`` what is lost or
    done twice, in the words of the report card's row (docs/explanation/report-card.md), which a
    test holds to the registry."""

    invariant: str
    cause: str
    read: str
    avoid: str
    documented: str = ""
    summary: str = ""

    def matches(self, invariant: str, detail: str) -> bool:
        return invariant == self.invariant and re.search(self.cause, detail) is not None


@dataclass(frozen=True)
class SurveyedEngine:
    """An engine the survey knows by name: its adapter (``module:attr``), the distribution its
    version is read from (``importlib.metadata``), and the behaviours known of it."""

    name: str
    target: str
    distribution: str
    behaviours: tuple[Behaviour, ...] = ()

    def documented(self, invariant: str, detail: str) -> Behaviour | None:
        return next((b for b in self.behaviours if b.matches(invariant, detail)), None)


LITEQUEUE_DOCS = "https://github.com/litements/litequeue#readme"
PERSISTQUEUE_DOCS = "https://github.com/peter-wangxu/persist-queue#readme"
HUEY_CONSUMER_DOCS = "https://huey.readthedocs.io/en/latest/consumer.html#consumer-shutdown"
HUEY_PIPELINE_DOCS = "https://huey.readthedocs.io/en/latest/guide.html#task-pipelines"
HUEY_API_DOCS = "https://huey.readthedocs.io/en/latest/api.html#SqliteHuey"
DBOS_CONCURRENT_DOCS = "https://docs.dbos.dev/explanations/concurrent-executions"
DBOS_RECOVERY_DOCS = "https://docs.dbos.dev/production/workflow-recovery"
DBOS_STEP_DOCS = "https://docs.dbos.dev/python/reference/decorators#step"
DBOS_SQLITE_DOCS = "https://docs.dbos.dev/python/reference/configuration"

ENGINES: dict[str, SurveyedEngine] = {e.name: e for e in (
    SurveyedEngine("reference", REFERENCE_TARGET, "crashgate"),
    SurveyedEngine("litequeue", "chaos.adapters.litequeue:adapter", "litequeue", (
        # The README says a popped message must be marked done, and offers no lock timeout nor a
        # way to hand a locked message out again: what happens when its consumer dies is not said.
        Behaviour("drains", r"still '[^']*:working'", LITEQUEUE_DOCS,
                  "keep a lease of your own: requeue (retry) messages whose lock_time is older than the longest step, "
                  "from one process, after making sure their consumer is dead",
                  summary="a message whose consumer died stays locked for good"),
        # The same where a family's setup leaves a consumer dead holding a message (resume, give-up), or
        # its done() meets a held lock or an I/O error (the store-error families); and an outbox
        # message (a litequeue queue too) whose sender's done() met a held lock (sender-busy).
        Behaviour("baseline", r"family '(resume|give-up|store-busy|heartbeat-busy|commit-io-error|disk-full)' .*ended '[^']*:working'",
                  LITEQUEUE_DOCS, "as for a message whose consumer died", summary="a message whose consumer died stays locked for good"),
        Behaviour("drains", r"outbox row '[^']*' is still unsent", LITEQUEUE_DOCS, "as for a message whose consumer died",
                  summary="a message whose consumer died stays locked for good"),
    )),
    SurveyedEngine("persist-queue", "chaos.adapters.persistqueue:adapter", "persist-queue", (
        # The README says items survive a restart ("Recoverable"); it does not say that
        # SQLiteAckQueue(auto_resume=True), the default, hands every unacked item out again when
        # any process opens the queue, a live consumer's item included.
        Behaviour("bounded-spend", r"paid calls", PERSISTQUEUE_DOCS,
                  "open the queue with auto_resume=False in every consumer, and resume unacked items "
                  "(resume_unack_tasks) only from one supervisor once their consumer is known dead",
                  summary="a step is paid for twice"),
        Behaviour("no-spend-after-memo", r".", PERSISTQUEUE_DOCS,
                  "open the queue with auto_resume=False in every consumer; check a step's recorded result before paying for it",
                  summary="again after its result was recorded"),
        # The same resumption seen in the rows: the live consumer finishes the item another process's
        # opening handed out again, writing after that takeover, and its job moves from the item
        # resumed ('extract:ready') to the next one the consumer put ('verify:ready').
        *(Behaviour(invariant, cause, PERSISTQUEUE_DOCS, "open the queue with auto_resume=False in every consumer",
                    summary="a live consumer finishes an item another process's opening resumed")
          for invariant, cause in (("fenced-writes", r"after '[^']+' had taken it over"), ("legal-transitions", r"moved '\w+:ready' -> '\w+:ready'"))),
    )),
    SurveyedEngine("huey", "chaos.adapters.huey:adapter", "huey", (
        # The consumer page says huey does not acknowledge tasks: a task whose consumer is killed
        # while it runs is lost ("at-most-once"; SIGNAL_INTERRUPTED is emitted at a SIGTERM, not at a SIGKILL).
        Behaviour("drains", r"still '[^']*:working'", HUEY_CONSUMER_DOCS,
                  "stop consumers with SIGINT and a stop timeout longer than the longest task; for a kill or a power loss, "
                  "record each job's progress in a table of your own and re-enqueue, from one periodic task, the jobs "
                  "whose task has no result and no live consumer (with idempotent tasks: a re-enqueued task may run twice)",
                  documented=HUEY_CONSUMER_DOCS, summary="a task killed after its dequeue is lost"),
        # The same, where a family's setup kills a consumer after its dequeue (the matrix groups the
        # baselines of resume with those of the store-error families below: one finding).
        Behaviour("baseline", r"family '(resume|give-up)' .*ended '[^']*:working'", HUEY_CONSUMER_DOCS,
                  "as for a task killed after its dequeue", documented=HUEY_CONSUMER_DOCS,
                  summary="a task killed after its dequeue is lost"),
        # The pipelines section says each task's result is passed to the next; not that the next
        # task is enqueued only after the result is stored, so that a kill in between loses the rest.
        Behaviour("drains", r"still '[^']*:done'", HUEY_PIPELINE_DOCS,
                  "do not rely on then() alone for steps that must all run: record each job's next step in a table of your "
                  "own, and re-enqueue, from one periodic task, a job whose last result is stored and whose next task is in no queue",
                  summary="a pipeline killed between storing a result and enqueuing the next task loses the rest"),
        # The same for the last task, which sends the effect: deliver's result stored, the send task never enqueued.
        *(Behaviour(invariant, cause, HUEY_PIPELINE_DOCS, "as for the rest of a pipeline lost before its next task",
                    summary="a pipeline killed between storing a result and enqueuing the next task loses the rest")
          for invariant, cause in (("drains", r"outbox row '[^']*' is still unsent"), ("effects-complete", r"applied 0 times"),
                                   ("outbox-at-least-once", r"never delivered"))),
        # SqliteHuey's page names its storage's arguments; not that a database locked past the
        # timeout, or a failing disk, at put_result (after the dequeue) is logged and the task dropped.
        Behaviour("baseline", r"family '(store-busy|heartbeat-busy|commit-io-error|disk-full)' .*ended '[^']*:working'", HUEY_API_DOCS,
                  "give SqliteHuey(timeout=...) more than any other writer holds huey's database, keep other writers off it, "
                  "and re-enqueue, from one periodic task, the jobs whose task has no result and no live consumer",
                  summary="a task whose result meets a held lock or an I/O error is lost"),
    )),
    SurveyedEngine("dbos", "chaos.adapters.dbos:adapter", "dbos", (
        # The workflow-recovery page says a launch recovers the PENDING workflows of its executor
        # id, and to give each executor its own; the concurrent-executions page says a step is run
        # at least once when two executors run one workflow. With the default id ("local") every
        # launch recovers every live workflow too.
        *(Behaviour(invariant, cause, DBOS_RECOVERY_DOCS,
                    "give each process its own executor id (executor_id in DBOS's config, or DBOS__VMID), so that a launch "
                    "recovers only its own executor's workflows; recover another's (the admin API's workflow-recovery endpoint) "
                    "only once that process is known dead",
                    documented=DBOS_CONCURRENT_DOCS, summary="a step of a live workflow is paid for again by a second launch")
          for invariant, cause in (("bounded-spend", r"paid calls"), ("no-spend-after-memo", r"."))),
        # The step decorator's reference gives max_attempts=3 as the default: an outage of three
        # failures in a row uses every attempt, and the workflow ends in ERROR for good.
        Behaviour("baseline", r"family 'retry-storm' .*ended 'ERROR'", DBOS_STEP_DOCS,
                  "give a step that calls a flaky service more attempts (max_attempts) and a backoff (interval_seconds, "
                  "backoff_rate) that outlasts its outages; start a workflow ended in ERROR again from its failed step by hand (DBOS.fork_workflow)",
                  documented=DBOS_STEP_DOCS, summary="a workflow whose step meets three failures in a row ends in ERROR for good"),
        # DBOS retries "database is locked" without an overall deadline (db_retry), and a step
        # whose result cannot be written (a full disk, an I/O error) leaves its workflow PENDING
        # while get_result waits: neither is said on the configuration page, which names the
        # SQLite system database.
        Behaviour("hangs", r"family '(store-busy|heartbeat-busy|disk-full|commit-io-error)'|stuck at .*dbos/", DBOS_SQLITE_DOCS,
                  "keep every other writer off DBOS's SQLite file (or use PostgreSQL), watch free space, bound each wait for "
                  "a result (get_result in a thread with a timeout) and alert on workflows PENDING longer than the longest step",
                  summary="a workflow waits without end on a held lock or after a failed write"),
        # The launch (its migrations' write) is not retried: a held lock fails it after SQLite's
        # busy timeout, an I/O error at once; a frozen DBOS process holding the lock does the same
        # to every other's launch.
        *(Behaviour(invariant, cause, DBOS_SQLITE_DOCS,
                    "retry DBOS.launch() with a backoff at start-up, and keep every other writer off DBOS's SQLite file",
                    summary="a launch that meets a held lock or an I/O error fails")
          for invariant, cause in (("raised", r"database is locked|disk I/O error|OperationalError"),
                                   ("baseline", r"family '(claim-busy|claim-io-error)'"),
                                   ("drains", r"while a peer was frozen"))),
    )),
)}


def known_engines() -> str:
    return ", ".join(ENGINES)


@dataclass(frozen=True)
class Budget:
    """How much of each engine a survey runs: a seeded sample of the matrix's scenarios (None:
    every crash point and one per pause class), interleaving pairs per family, and histories."""

    sample: int | None
    pairs: int
    histories: int
    shrink_s: float


BUDGETS: dict[str, Budget] = {
    "small": Budget(sample=100, pairs=3, histories=8, shrink_s=20.0),  # about a minute per engine
    "standard": Budget(sample=600, pairs=10, histories=40, shrink_s=60.0),
    "full": Budget(sample=None, pairs=200, histories=130, shrink_s=300.0),
}

# What an invariant's violation means for a team's jobs, as the start of a sentence.
HAPPENED: dict[str, str] = {
    "drains": "A job was lost: it never finished once the faults stopped and every lease and backoff had passed",
    "bounded-spend": "A step was done twice: it was paid for more often than the faults explain",
    "no-spend-after-memo": "A step was done twice: it was paid for again after its result had been recorded",
    "progress-recorded": "A step's result was lost: the job moved past a step whose result was never recorded",
    "memo-stable": "A step's recorded result changed after it was written",
    "effects-complete": "A finished job's effect was lost or applied twice",
    "outbox-at-least-once": "An effect was lost, sent without its record, or applied twice",
    "effects-through-outbox": "A step acted on the world outside the outbox, where a crash repeats or loses it",
    "fenced-writes": "A worker wrote to a job after another had taken it over",
    "legal-transitions": "A job moved along an edge its state table does not have, or a job row was lost or duplicated",
    "idempotent-submit": "A repeated submit changed or duplicated a job",
    "same-outcome": "A job ended differently than it does without the fault",
    "cost-recorded": "A step's cost was not recorded as an amount of money",
    "retry-spread": "Retries were not spread out in time",
    "hangs": "A scenario never finished",
    "baseline": "The workflow fails without any fault",
    "raised": "The code under test raised",
    "point-reached": "A scenario tested nothing it could repeat: run again, the engine did not do the same",
}
UNDER: dict[str, str] = {
    "": "without any fault",
    "crash": "when a worker was killed (SIGKILL) at a line",
    "pause-live": "when a worker froze at a line, its lease still valid, while another worker ran",
    "pause-expired": "when a worker froze at a line past its lease, while another worker took its job",
    "interleave": "when two workers' runs interleaved",
    "explore": "in a random history of runs, kills, pauses and clock jumps",
}


def sentence(invariant: str, fault: str, example: str) -> str:
    """One sentence on what happened: what the violation means, under which fault, what was seen."""
    what = HAPPENED.get(invariant, f"The invariant {invariant} was broken")
    under = UNDER.get(fault, f"under the host fault {fault}")
    seen = example if len(example) <= EXAMPLE_CHARS_MAX else example[: EXAMPLE_CHARS_MAX - 1] + "…"
    return f"{what}, {under}: {seen.rstrip('.')}."


@dataclass
class SurveyFinding:
    """One invariant broken for one cause, across the matrix's scenarios and the histories."""

    invariant: str
    cause: str
    example: str
    faults: Counter = field(default_factory=Counter)
    families: set[str] = field(default_factory=set)
    replays: set[str] = field(default_factory=set)
    behaviour: Behaviour | None = None

    @property
    def scenarios(self) -> int:
        return sum(self.faults.values())

    @property
    def fault(self) -> str:
        """The fault it was seen under most often (a matrix's fault before the histories')."""
        return min(self.faults, key=lambda k: (-self.faults[k], k == "explore", k))

    @property
    def replay(self) -> str:
        """The shortest command that replays it (one scenario of the matrix, where one showed it)."""
        return min(self.replays, key=lambda r: (" explore " in r, len(r), r))

    def to_json(self) -> dict[str, Any]:
        b = self.behaviour
        return {"invariant": self.invariant, "cause": self.cause, "example": self.example, "sentence": sentence(self.invariant, self.fault, self.example),
                "faults": dict(self.faults.most_common()), "families": sorted(self.families), "scenarios": self.scenarios,
                "fix": fix_for(self.invariant, self.example), "replay": self.replay,
                "documented": None if b is None else bool(b.documented), "documentation": (b.documented or b.read) if b else None,
                "avoid": b.avoid if b else None}


@dataclass
class EngineSurvey:
    """What the survey of one engine did: ``status`` is surveyed, skipped (its library is not
    installed) or failed (its survey could not run; ``reason`` says why)."""

    name: str
    target: str
    distribution: str
    version: str = ""
    status: str = "surveyed"
    reason: str = ""
    seconds: float = 0.0
    scenarios: int = 0
    violated: int = 0
    families: int = 0
    skipped_families: int = 0
    histories: int = 0
    rules: int = 0
    findings: list[SurveyFinding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.target, "distribution": self.distribution, "version": self.version,
                "status": self.status, "reason": self.reason or None, "install": INSTALL_HINT if self.status == "skipped" else None,
                "seconds": round(self.seconds, 1), "scenarios": self.scenarios, "violated": self.violated, "families": self.families,
                "skipped_families": self.skipped_families, "histories": self.histories, "rules": self.rules,
                "findings": [f.to_json() for f in self.findings]}


Phase = Callable[[str, str], None]  # (phase, what it did) -> shown by the progress display


def survey_engine(engine: SurveyedEngine, budget: Budget, *, seed: int = 0, jobs: int = 1,
                  phase: Phase = lambda name, done: None) -> EngineSurvey:
    """Survey one engine: its crash matrix (crashes, pauses, interleavings) and random histories.

    ``phase(name, done)`` is told when a phase starts (``done`` empty) and ends (what it did)."""
    out = EngineSurvey(engine.name, engine.target, engine.distribution)
    started = time.perf_counter()
    try:
        out.version = importlib.metadata.version(engine.distribution) if engine.distribution else ""
    except importlib.metadata.PackageNotFoundError:
        out.status, out.reason = "skipped", f"{engine.distribution} is not installed; {INSTALL_HINT}"
        return out
    from chaos.machine import explore
    from chaos.matrix.runner import MatrixUsageError, run_matrix

    report = histories = None
    try:
        phase("crash matrix", "")
        report = run_matrix(engine.target, seed=seed, sample=budget.sample, pairs=budget.pairs, jobs=jobs,
                            faults=("crash", "pause", "interleave"))
        out.scenarios, out.families, out.skipped_families = report.points, len(report.baselines), len(report.skipped)
        out.violated = sum(1 for r in report.results if not r.outcome.held)
        phase("crash matrix", f"{out.scenarios} scenarios in {out.families} families, {out.violated} violated, {report.seconds:.1f}s")
        phase("random histories", "")
        histories = explore(engine.target, profile="ci", seed=seed, max_examples=budget.histories, shrink_s=budget.shrink_s)
        out.histories, out.rules = histories.examples, histories.rules
        phase("random histories", f"{out.histories} histories, {out.rules} steps, {len(histories.findings)} failing, {histories.seconds:.1f}s")
    except (MatrixUsageError, ValueError) as exc:  # an adapter that does not load, a library that refuses
        out.status, out.reason = "failed", " ".join(str(exc).split())
    out.findings = grouped(report, histories) if report is not None else []
    for finding in out.findings:
        finding.behaviour = engine.documented(finding.invariant, finding.example)
    out.seconds = time.perf_counter() - started
    return out


def grouped(matrix: Any, histories: Any = None) -> list[SurveyFinding]:
    """The findings of a matrix report and an exploration's report, grouped by invariant and cause
    (:func:`chaos.core.findings.group_key`) across both, the most scenarios first."""
    groups: dict[tuple[str, str], SurveyFinding] = {}
    _add_matrix(groups, matrix)
    if histories is not None:
        _add_histories(groups, histories)
    return sorted(groups.values(), key=lambda f: (-f.scenarios, f.invariant, f.cause))


def _add(groups: dict[tuple[str, str], SurveyFinding], violations: Iterable[tuple[str, str]], fault: str, family: str, replay: str) -> None:
    """One scenario's violations: a scenario that breaks one invariant twice for one cause counts once."""
    seen: set[tuple[str, str]] = set()
    for invariant, detail in violations:
        key = group_key(invariant, detail)
        finding = groups.setdefault(key, SurveyFinding(invariant, normalise(detail), detail))
        if key in seen:
            continue
        seen.add(key)
        finding.faults[fault] += 1
        if family:
            finding.families.add(family)
        finding.replays.add(replay)


def _add_matrix(groups: dict[tuple[str, str], SurveyFinding], report: Any) -> None:
    """The matrix's violations: each family's run without any fault, then every scenario's."""
    for family, base in report.baselines.items():
        replay = ["python", "-m", "chaos", "matrix", "--target", report.target, "--family", family, "--faults", "crash",
                  "--sample", "1", "--seed", str(report.seed)]
        _add(groups, [(v.invariant, v.detail) for v in base.violations], "", family, " ".join(shlex.quote(p) for p in replay))
    for result in report.results:
        _add(groups, [(v.invariant, v.detail) for v in result.outcome.violations], result.fault, result.family, result.replay)


def _add_histories(groups: dict[tuple[str, str], SurveyFinding], report: Any) -> None:
    for finding in report.findings:
        violations = [(v.invariant, v.detail) for v in finding.violations] or [(finding.invariant, finding.failure.splitlines()[0])]
        _add(groups, violations, "explore", "", finding.replay or report.replay)


def engines_named(names: Iterable[str]) -> list[SurveyedEngine]:
    """The registry's engines of ``names`` (every one when empty); ValueError names an unknown one."""
    chosen = list(dict.fromkeys(names)) or list(ENGINES)
    unknown = [n for n in chosen if n not in ENGINES]
    if unknown:
        raise ValueError(f"--engine {unknown[0]!r} is not an engine the survey knows; pass one of: {known_engines()} "
                         "(or --target MODULE:ATTR for an adapter of your own)")
    return [ENGINES[n] for n in chosen]


def format_survey(surveys: list[EngineSurvey], budget: str, seed: int) -> str:
    """The survey as a person reads it: per engine what ran and each finding, said in one sentence,
    whether the library documents it, how to avoid it, and the shortest replay command."""
    out = [f"survey (budget {budget}, seed {seed}): {len(surveys)} {'engine' if len(surveys) == 1 else 'engines'}"]
    for s in surveys:
        shown = [s.target] if s.target != s.name else []
        shown += [f"{s.distribution} {s.version}"] if s.version else []
        head = f"{s.name} ({', '.join(shown)})" if shown else s.name
        if s.status == "skipped":
            out.append(f"{head}: skipped: {s.reason}")
            continue
        if s.status == "failed":
            out.append(f"{head}: FAILED TO RUN after {s.seconds:.1f}s: {s.reason}")
            continue
        found = f"{len(s.findings)} {'finding' if len(s.findings) == 1 else 'findings'}" if s.findings else "no finding"
        skipped = f" ({s.skipped_families} not applicable)" if s.skipped_families else ""
        out.append(f"{head}: {found}; {s.scenarios} scenarios in {s.families} families{skipped}, {s.violated} violated; "
                   f"{s.histories} random histories ({s.rules} steps); {s.seconds:.1f}s")
        for n, f in enumerate(s.findings, 1):
            faults = ", ".join(f"{kind or 'no fault'} {count}" for kind, count in f.faults.most_common())
            families = f" of {len(f.families)} {'family' if len(f.families) == 1 else 'families'}" if f.families else ""
            out.append(f"  FINDING {n}: {f.invariant} at {f.scenarios} {'scenario' if f.scenarios == 1 else 'scenarios'}{families} [{faults}]")
            out.append(f"    what happened: {sentence(f.invariant, f.fault, f.example)}")
            b = f.behaviour
            if b is None:
                out.append("    documented: not known (the survey's registry has no entry for this behaviour)")
            elif b.documented:
                out.append(f"    documented: yes, {b.documented}")
            else:
                out.append(f"    documented: no (not said in {b.read})")
            if b is not None:
                out.append(f"    avoid: {b.avoid}")
            fix = fix_for(f.invariant, f.example)
            if fix and b is None:
                out.append(f"    fix: {fix}")
            out.append(f"    replay: {f.replay}")
    return "\n".join(out)


def run_cli(args: Any) -> int:
    """``python -m chaos survey``: 0 when every engine was surveyed or skipped (findings are the
    survey's product), 1 when one could not run, 2 on bad input."""
    import json

    from engine.terminal import printable

    from chaos.adapter import load_adapter

    try:  # every engine of the registry by default; --target alone surveys only the adapters it names
        engines = engines_named(args.engine) if args.engine or not args.target else []
        for target in dict.fromkeys(args.target or ()):
            load_adapter(target)  # a target that does not load is bad input, said before anything runs
            engines.append(SurveyedEngine(target, target, ""))
    except ValueError as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)
        return 2
    budget = BUDGETS[args.budget]
    plain = args.plain or os.environ.get("CI", "").lower() in ("1", "true", "yes") or not sys.stderr.isatty()
    surveys: list[EngineSurvey] = []
    # What the runs print (Hypothesis's warnings, a library's own output) goes to stderr with the
    # progress: stdout holds the report alone, one JSON document with --json.
    with _stdout_to_stderr(), _Display(len(engines), plain=plain) as display:
        for number, engine in enumerate(engines, 1):
            display.engine(number, engine.name)
            surveys.append(survey_engine(engine, budget, seed=args.seed, jobs=args.jobs, phase=display.phase))
            display.ended(surveys[-1])
    if args.json:
        print(json.dumps({"crashgate_survey": SURVEY_FORMAT, "budget": args.budget, "seed": args.seed,
                          "engines": [s.to_json() for s in surveys]}, indent=2))
    else:
        print(format_survey(surveys, args.budget, args.seed))
    return 1 if any(s.status == "failed" for s in surveys) else 0


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send stdout to stderr, Python's and the file descriptor's (processes started meanwhile inherit it)."""
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no file descriptor 1 (stdout closed): Python's stream is redirected alone
        saved = -1
    try:
        if saved >= 0:
            os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        if saved >= 0:
            os.dup2(saved, 1)
            os.close(saved)


class _Display:
    """Progress on stderr (stdout is the report): a bar over the engines' phases with a spinner
    and the time spent (rich), or a plain line as each phase starts and ends."""

    PHASES = 2  # the crash matrix, the random histories

    def __init__(self, engines: int, *, plain: bool) -> None:
        self.plain, self.total, self.out = plain, engines * self.PHASES, sys.stderr
        self.progress: Any = None
        self.name, self.number, self.started = "", 0, time.perf_counter()

    def __enter__(self) -> "_Display":
        if not self.plain:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

            self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                                     TimeElapsedColumn(), console=Console(file=self.out), transient=True)
            self.progress.__enter__()
            self.task = self.progress.add_task("survey", total=self.total)
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.progress is not None:
            self.progress.__exit__(*exc)

    def engine(self, number: int, name: str) -> None:
        self.name, self.number, self.started = name, number, time.perf_counter()

    def phase(self, name: str, done: str) -> None:
        where = f"{self.name} ({self.number}/{self.total // self.PHASES})"
        if self.progress is not None:
            if done:
                self.progress.console.print(f"{where}: {name}: {done}")
                self.progress.advance(self.task)
            else:
                self.progress.update(self.task, description=f"{where}: {name}")
        else:
            print(f"survey: {where}: {name}: {done}" if done else f"survey: {where}: {name}...", file=self.out, flush=True)

    def ended(self, survey: EngineSurvey) -> None:
        """An engine's survey ended: its phases that did not run count as done, and a line says how."""
        if self.progress is not None:
            self.progress.update(self.task, completed=self.number * self.PHASES)
        status = survey.status if survey.status != "surveyed" else plural(len(survey.findings), "finding")
        line = f"{self.name} ({self.number}/{self.total // self.PHASES}): {status}, {time.perf_counter() - self.started:.1f}s"
        if self.progress is not None:
            self.progress.console.print(line)
        else:
            print(f"survey: {line}", file=self.out, flush=True)
