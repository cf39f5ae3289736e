"""The adapter contract: what the harness needs from an engine, and what it can use if offered.

An adapter is how the harness drives an engine it did not write. The **required** part is small
(:class:`Adapter` and the :class:`Session` it opens): create a database, open a session that
submits, runs one iteration of the engine's loop and one outbox pass, say what the states are and
which code's lines are crash points, and show what is in the database (:class:`Snapshot`).
Everything else is an **optional capability** (:data:`CAPABILITIES`): each is a method or an
attribute with a documented default, and each one missing switches off a named fault or check,
which :func:`capabilities` reports in one line each (``python -m chaos adapter --target X``).

Engines on SQLite declare their tables instead of writing SQL: :class:`~chaos.adapters.sql.SqlSchema`
installs the audit triggers and reads the :class:`Snapshot`, and
:class:`~chaos.adapters.sql.SqliteAdapter` is a base class that needs only the engine's pieces.
``examples/minimal_engine/`` gates an engine of its own in under 60 lines that way.

The world a session's steps talk to (``world.model``, ``world.documents``, ``world.sender``) is
given to :meth:`Adapter.open`. A paid call is ``world.model.complete(ctx, task, prompt)``, whose
``ctx`` names the call: ``ctx.job_id``, ``ctx.step``, ``ctx.worker_id`` and, where the engine has
them, ``ctx.token`` (the lease's fencing token) and ``ctx.heartbeat()`` (renew the lease; a slow
call calls it as the engine's heartbeat would). It answers any task, deterministically.

>>> from chaos.adapter import capabilities, load_adapter
>>> reference = load_adapter("chaos:reference_adapter")
>>> [s.name for s in capabilities(reference) if s.disabled]  # every fault and check can run
[]
>>> print(next(s for s in capabilities(reference) if s.name == "payload").line())
  yes  payload

The jobs a scenario submits are the adapter's: ``job_ids(n)`` names them (``doc-1`` .. ``doc-n``
by default), ``payload(job_id)`` says what each carries, and a family names a job by its
position (``<job 1>``), so that a finding speaks of ``order-1001:email`` where the adapter's
jobs are orders:

>>> job_ids_for(reference, 2), resolve_jobs("damage:payload:<job 2>", reference)
(('doc-1', 'doc-2'), 'damage:payload:doc-2')
"""

from __future__ import annotations

import importlib
import inspect as _inspect_module
import random
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Protocol, Sequence, runtime_checkable

from chaos.core.errors import ENGINE_ERRORS, PYTHON_ERRORS
from chaos.core.models import ITERATION_CALLS_MAX

__all__ = [
    "Adapter",
    "CAPABILITIES",
    "Capability",
    "CapabilityStatus",
    "DECLARED_WORDS",
    "ENGINE_ERRORS",
    "JOBS_MAX",
    "JOB_REF",
    "JobView",
    "OutboxView",
    "PYTHON_ERRORS",
    "REFERENCE_TARGET",
    "Session",
    "Snapshot",
    "ServerDatabases",
    "capabilities",
    "capability_statuses",
    "create_database",
    "default_job_ids",
    "describe_capabilities",
    "job_ids_for",
    "job_ref",
    "load_adapter",
    "payload_for",
    "allowed_effects",
    "probe_of",
    "resolve_jobs",
    "sending_steps",
    "server_databases",
    "session_capabilities",
]

REFERENCE_TARGET = "chaos:reference_adapter"


@dataclass(frozen=True)
class JobView:
    """One job as the harness sees it. ``lease_owner`` is None when no worker holds the job."""

    state: str
    payload: str
    lease_owner: str | None
    lease_until: float | None
    next_run_at: float | None
    last_error: str | None = None  # what the engine says went wrong last (shown in failures)
    result: str | None = None  # the job's result as stored (compared by same-outcome)
    lease_token: str | int | None = None  # the lease's fencing token, where the engine has one


@dataclass(frozen=True)
class OutboxView:
    """One outbox row. Its effect is delivered under :attr:`key`: ``effect_key`` where the engine
    sends its own, else ``<job_id>:<kind>``."""

    id: int
    job_id: str
    kind: str
    sent_at: float | None
    next_attempt_at: float | None = None  # when the sender may try it (again)
    effect_key: str | None = None

    @property
    def key(self) -> str:
        return self.effect_key if self.effect_key is not None else f"{self.job_id}:{self.kind}"


@dataclass
class Snapshot:
    """What the harness sees in the engine's database, read on a connection of its own.

    ``transitions`` (job, from, to) and ``memo_changes`` (job, step, what) come from audit
    triggers the harness installs (``None`` as ``from``: the job was created); ``writes`` (job,
    kind, writer, detail) from the writer attribution, where the adapter offers it.
    """

    jobs: dict[str, JobView] = field(default_factory=dict)
    transitions: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    memos: dict[tuple[str, str], str] = field(default_factory=dict)
    # (job, step) -> the cost its memo row records, as stored (where the engine records one).
    memo_costs: dict[tuple[str, str], Any] = field(default_factory=dict)
    memo_changes: list[tuple[str, str, str]] = field(default_factory=list)
    outbox: list[OutboxView] = field(default_factory=list)
    writes: list[tuple[str, str, str, str]] = field(default_factory=list)
    # job -> the state the harness itself wrote into its row as a family's premise (a damaged
    # state): the engine's move out of it, into a parked state, is its quarantine.
    damaged: dict[str, str] = field(default_factory=dict)


@runtime_checkable
class Session(Protocol):
    """One process's connection to the engine under test (opened in a forked child).

    ``run_once`` runs one iteration of the engine's loop and says what it did: ``"idle"`` when
    nothing was due and ``"busy"`` when the database stayed locked (both: no progress), any other
    word otherwise. ``send_outbox`` runs one outbox pass and returns how many rows it sent. An
    engine whose loop does one step per call declares ``iteration = "until-idle"`` on its adapter
    (see :mod:`chaos.core.iteration`): the harness then calls ``run_once`` until it makes no progress.
    """

    def submit(self, job_id: str, payload: Any) -> None: ...

    def run_once(self) -> str: ...

    def send_outbox(self) -> int: ...

    def close(self) -> None: ...


@runtime_checkable
class Adapter(Protocol):
    """What the harness needs from an engine (the required part; see :data:`CAPABILITIES`).

    ``states()`` is the state table (state -> the states it may move to); ``step_states()`` maps
    each step to its (working, done) states; ``settled_states()`` are the states a job may rest
    in; ``final_effects()`` maps each final state to the effect kinds a job there has delivered.
    ``trace_paths()`` are the directories or files whose lines are crash points, ``targets()``
    the functions an iteration enters (``{"worker": ..., "sender": ...}``).
    """

    name: str
    lease_s: float

    def states(self) -> Mapping[str, Sequence[str]]: ...

    def settled_states(self) -> frozenset[str]: ...

    def final_effects(self) -> Mapping[str, Sequence[str]]: ...

    def step_states(self) -> Mapping[str, tuple[str, str]]: ...

    def trace_paths(self) -> list[str]: ...

    def targets(self) -> dict[str, Callable[..., Any]]: ...

    def create(self, db_path: str) -> None: ...

    def open(self, db_path: str, world: Any, *, worker_id: str, clock: Any, rng: random.Random) -> Session: ...

    def inspect(self, db_path: str) -> Snapshot: ...


@runtime_checkable
class ServerDatabases(Protocol):
    """Optional: an adapter whose databases live on a server, not in files (the PostgreSQL
    reference adapter). ``template_db`` makes a family's template in a new database,
    ``new_scenario_db`` copies it for one scenario, ``drop_db`` drops either; all three or none."""

    def template_db(self, directory: str) -> str: ...

    def new_scenario_db(self, template: str, directory: str) -> str: ...

    def drop_db(self, db_path: str) -> None: ...


def server_databases(adapter: Adapter) -> ServerDatabases | None:
    """``adapter`` as a maker of server databases, or None where its databases are files."""
    return adapter if all(callable(getattr(adapter, hook, None)) for hook in ("template_db", "new_scenario_db", "drop_db")) else None  # type: ignore[return-value]


def create_database(adapter: Adapter, db_path: str, *, attribute_writers: bool = True) -> None:
    """``adapter.create(db_path)``, with the writer attribution where the adapter offers it (its
    ``create`` takes ``attribute_writers``) and it is wanted."""
    if attribute_writers and "attribute_writers" in _inspect_module.signature(adapter.create).parameters:
        adapter.create(db_path, attribute_writers=True)  # type: ignore[call-arg]
    else:
        adapter.create(db_path)


Probe = Callable[[str, str, str, Any, float], "tuple[bool, bool]"]


def payload_for(adapter: Adapter, job_id: str) -> Any:
    """The payload the harness submits for ``job_id`` wherever a plan or a test does not give one:
    the adapter's ``payload(job_id)`` where it has one, else ``{"source": job_id}`` (what the
    reference workflow's fetch step reads)."""
    hook = getattr(adapter, "payload", None)
    return hook(job_id) if callable(hook) else {"source": job_id}


JOBS_MAX = 1000  # a scenario submits a few jobs; a plan's count is bounded by chaos.plans.plan.JOBS_MAX too
# A job named by its position among the adapter's job ids, as families and fault plans name them.
JOB_REF = re.compile(r"<job ([1-9][0-9]{0,3})>")


def job_ref(position: int) -> str:
    """How a family names the adapter's ``position``-th job (from 1): ``<job 1>``, resolved by
    :func:`resolve_jobs` when the family runs on an adapter."""
    if not 1 <= position <= JOBS_MAX:
        raise ValueError(f"job position {position} must be between 1 and {JOBS_MAX}")
    return f"<job {position}>"


def default_job_ids(n: int) -> tuple[str, ...]:
    """The job ids of an adapter that names none: ``doc-1`` .. ``doc-n`` (the reference workflow's documents)."""
    return tuple(f"doc-{i}" for i in range(1, n + 1))


def job_ids_for(adapter: Adapter, n: int) -> tuple[str, ...]:
    """The first ``n`` job ids the harness submits on ``adapter``: its ``job_ids(n)`` where it has
    one, else :func:`default_job_ids`. They are the ids every finding, effect key and replay names.

    Raises ValueError, naming the adapter and the fix, where ``job_ids(n)`` does not return ``n``
    distinct non-empty strings (a finding would otherwise blame the engine for the adapter's slip).
    """
    if not 0 <= n <= JOBS_MAX:
        raise ValueError(f"a scenario submits between 0 and {JOBS_MAX} jobs, not {n}")
    hook = getattr(adapter, "job_ids", None)
    if not callable(hook):
        return default_job_ids(n)
    ids = tuple(hook(n))
    name = getattr(adapter, "name", type(adapter).__name__)
    if len(ids) != n or len(set(ids)) != n or not all(isinstance(i, str) and i for i in ids):
        raise ValueError(f"adapter {name!r}: job_ids({n}) returned {list(ids)[:5]!r}{'...' if len(ids) > 5 else ''}; "
                         f"return {n} distinct non-empty strings, e.g. [f'order-{{1000 + i}}' for i in range(1, n + 1)]")
    return ids


def resolve_jobs(text: str, adapter: Adapter) -> str:
    """``text`` (a job id, a setup action, a phase) with every ``<job N>`` replaced by the
    adapter's N-th job id; text that names no job by position comes back as it is."""
    positions = [int(p) for p in JOB_REF.findall(text)]
    if not positions:
        return text
    ids = job_ids_for(adapter, max(positions))
    return JOB_REF.sub(lambda m: ids[int(m.group(1)) - 1], text)


def allowed_effects(adapter: Adapter) -> tuple[Any, ...]:
    """What ``adapter`` declares is no effect on the world (its ``allowed_effects``, entries such
    as ``file:/var/cache/myapp/*``; see :mod:`chaos.core.effects`), parsed; none by default."""
    from chaos.core.effects import parse_allowed

    entries = getattr(adapter, "allowed_effects", ())
    if isinstance(entries, str):
        entries = (entries,)
    try:
        return parse_allowed(entries)
    except ValueError as exc:
        raise ValueError(f"adapter {getattr(adapter, 'name', type(adapter).__name__)!r}: allowed_effects: {exc}") from None


def sending_steps(adapter: Adapter) -> dict[str, str]:
    """Each effect kind a step of ``adapter`` sends itself, and that step: its ``sends_from_steps``
    (step -> the kinds it sends through ``world.sender.send`` inside the step, not through an
    outbox sender) turned around; none by default.

    A send fault the world's receiver meets for such a kind, under the key ``<job_id>:<kind>``, is
    then a fault of that job's step (``bounded-spend`` allows the retry it causes one more paid
    call, as it does after a model's fault; ``same-outcome`` in random histories lets a poison one
    end the job otherwise). Raises ValueError, naming the adapter and the fix, where a step is not
    one of ``step_states()`` or a kind is declared by two steps (its faults would be nobody's, or
    anybody's).

    >>> class Desk:
    ...     name, sends_from_steps = "desk", {"answer": ("reply",)}
    ...     def step_states(self): return {"triage": ("triaging", "triaged"), "answer": ("answering", "answered")}
    >>> sending_steps(Desk())
    {'reply': 'answer'}
    """
    declared = getattr(adapter, "sends_from_steps", None)
    if declared is None:
        return {}
    name = getattr(adapter, "name", type(adapter).__name__)
    if not isinstance(declared, Mapping):
        raise ValueError(f"adapter {name!r}: sends_from_steps is {declared!r}; give a dict of step -> the effect kinds it "
                         "sends itself, e.g. {'answer': ('reply',)}")
    steps = adapter.step_states()
    out: dict[str, str] = {}
    for step, kinds in declared.items():
        if step not in steps:
            raise ValueError(f"adapter {name!r}: sends_from_steps names step {step!r}, which is not one of its steps "
                             f"({', '.join(map(repr, steps))}); name the step whose code calls world.sender.send")
        for kind in (kinds,) if isinstance(kinds, str) else kinds:
            if out.get(kind, step) != step:
                raise ValueError(f"adapter {name!r}: sends_from_steps declares effect {kind!r} for steps {out[kind]!r} and "
                                 f"{step!r}; a kind is sent by one step, so that a fault met sending it is that step's")
            out[kind] = step
    return out


def probe_of(adapter: Adapter, db_path: str) -> Probe | None:
    """The adapter's ``probe`` on ``db_path`` (is a step's memo committed, does the caller hold the
    lease, at the moment of a paid call), or None where it offers none (calls are then not classified)."""
    probe = getattr(adapter, "probe", None)
    return probe(db_path) if callable(probe) else None


@dataclass(frozen=True)
class Capability:
    """An optional part of the contract: where it lives, its default, what lacking it disables."""

    name: str
    where: str  # "adapter" or "session"
    offers: str  # what to define
    default: str  # what the harness does without it
    disables: str  # the faults or checks that cannot run without it ("" = nothing, a default serves)


CAPABILITIES: tuple[Capability, ...] = (
    Capability("payload", "adapter", "payload(job_id) -> the payload to submit", "{'source': job_id}", ""),
    Capability("job_ids", "adapter", "job_ids(n) -> the first n job ids to submit, e.g. ['order-1001', 'order-1002']: "
               "the ids findings, effect keys and replays name", "doc-1 .. doc-n", ""),
    Capability("conflict_errors", "adapter", "conflict_errors: the exceptions submit raises for an id with another payload",
               "none", "idempotent-submit's refusal check (every refusal is reported as an error; or declare submit_conflict)"),
    Capability("submit_conflict", "adapter", "submit_conflict = 'raises' or 'first-wins': submit of an existing id with another payload",
               "'raises' (one of conflict_errors)", ""),
    Capability("receiver", "adapter", "receiver = 'dedupes' or 'strict': 'strict' where your engine promises exactly-once "
               "effects (its receiver does not dedupe: every delivery of a key is applied, and a second one is reported)",
               "'dedupes' (a key is applied once; a re-send is recorded, never a duplicate)", ""),
    Capability("iteration", "adapter", "iteration = 'one-call' or 'until-idle': 'until-idle' where run_once does one step "
               f"per call (an iteration is then calls until one answers 'idle' or 'busy', at most {ITERATION_CALLS_MAX})",
               "'one-call' (one run_once is a job's whole run; later steps run only in the recovery, never at a crash point)", ""),
    Capability("recovery", "adapter", "recovery = 'lease-expiry', 'restart' or 'at-open': how your engine gets a dead worker's "
               "work back ('restart': the dead worker starts again under its own identity; 'at-open': the next process to open "
               "the engine recovers it; neither waits for a lease)",
               "'lease-expiry' (time passes the lease, then a worker of a new identity takes over)", ""),
    Capability("time_source", "adapter", "time_source = 'passed' or 'wall': 'wall' where your engine calls time.time() "
               "instead of reading the clock open() passes it (in each worker's process the harness then answers time.time() "
               "from its own clock; a sandbox, as scripted plans and chaos_world use, refuses it)",
               "'passed' (the engine reads the clock it is given)", ""),
    Capability("poison_payload", "adapter", "poison_payload(job_id) -> a payload your first step refuses (a failed job "
               "to requeue, in random histories; the poison-payload family)", "the reference workflow's, {'source': ''} (for another workflow's steps the poison-payload family is "
               "skipped, saying why)", ""),
    Capability("needs_human_states", "adapter", "needs_human_states() -> the states in which a job waits for a person "
               "(resolve is legal there, in random histories)", "'needs_human' if the table has it, else none", ""),
    Capability("initial_states", "adapter", "initial_states() -> the states a job may be created in",
               "'pending' if the table has it, else the table's first state", ""),
    Capability("tasks", "adapter", "tasks() -> {reference task: your task}, e.g. {'extract': 'summarise'}",
               "the reference's task names (a family whose fault names a task your workflow lacks is reported skipped)", ""),
    Capability("fault_errors", "adapter", "fault_errors: {fault kind: exception factory}, e.g. PYTHON_ERRORS",
               "the reference engine's error types (ENGINE_ERRORS: engine.StepTimeout, ...)", ""),
    Capability("schema", "adapter", "schema: a chaos.adapters.sql.SqlSchema naming your tables (SqliteAdapter declares one)",
               "none", "the damage faults (damage-payload, damage-memo, damage-state), the damaged-payload family and, on "
               "PostgreSQL, the lock-held fault, the busy families and the integrity check's consistency query"),
    Capability("probe", "adapter", "probe(db) -> fn(job, step, worker, token, now) -> (memo committed, lease valid)",
               "calls are not classified", "no-spend-after-memo"),
    Capability("writer_attribution", "adapter", "create(db, *, attribute_writers=True) installs the writer triggers",
               "writes are not attributed", "fenced-writes"),
    Capability("connections", "adapter", "connections = 'session' or 'pool': 'pool' where your engine opens its own SQLite "
               "connections (a connection pool: DBOS, SQLAlchemy); in each worker's process the harness then hooks sqlite3.connect "
               "and gives every connection opened on the engine's database the writer, the statement tracing and the faults that "
               "connection() would get", "'session' (the session's connection(), where it offers one)", ""),
    Capability("create_with", "adapter", "create_with = 'connection' or 'path': 'path' where create_schema opens the database "
               "itself from its path (it then runs in a child process of its own)", "'connection' (create_schema(conn))", ""),
    Capability("engines_per_process", "adapter", "engines_per_process = 'many' or 'one': 'one' where your library keeps one "
               "instance a process (DBOS: one DBOS, launched once); a second worker then runs in a fresh process of its own, "
               "not inside the first one's process", "'many' (each session opens an engine of its own)", ""),
    Capability("connection", "session", "connection() -> the session's sqlite3.Connection (or declare connections = 'pool')",
               "every line is its own crash and pause class; no write lock is observed",
               "crash and pause classes, the host's disk-full and held-lock faults, the disk-full family"),
    Capability("claim_only", "session", "claim_only(): claim the next job and return, as a worker killed right after its claim",
               "", "the resume and give-up families"),
    Capability("human_actions", "session", "requeue(job), resolve(job, action), cancel(job)",
               "", "the cancel-race and cancel-too-late families and the histories' human actions"),
    Capability("busy_timeout", "session", "set_busy_timeout(seconds)",
               "the engine's own busy timeout", ""),
    Capability("configure_worker", "session", "configure_worker(**settings): the session's worker rebuilt with a family's "
               "settings of your engine's worker (the reference's: threaded=False, step_timeout_s=...)",
               "", "the inline-steps family"),
    Capability("allowed_effects", "adapter", "allowed_effects = ('file:/var/cache/myapp/*', 'connect:127.0.0.1:6379', ...): "
               "what your steps do that is no effect on the world (a cache, a read-only service)",
               "every file written outside the run's folder, connection and process a step starts is an effect", ""),
    Capability("sends_from_steps", "adapter", "sends_from_steps = {'answer': ('reply',)}: the steps that send effects "
               "of these kinds themselves (world.sender.send inside the step, under the key '<job_id>:<kind>', not through an "
               "outbox sender); a send fault met there is then a fault of that step, which explains its retry",
               "none (a send fault met inside a step is nobody's: the retry it causes counts against bounded-spend, and the "
               "end it causes against same-outcome)", ""),
    Capability("scenarios", "adapter", "scenarios() -> your own families (chaos.Scenario)", "the reference families", ""),
    Capability("scenario_timeout_s", "adapter", "scenario_timeout_s = 300.0: seconds one scenario of your engine may run "
               "before it is a 'hangs' finding (an engine that launches slowly; --scenario-timeout overrides it)",
               "60 s, and at least ten times a family's baseline (chaos.core.hangs)", ""),
)


# Capabilities declared as a word: ``python -m chaos adapter`` shows the word declared.
DECLARED_WORDS = ("submit_conflict", "receiver", "iteration", "recovery", "time_source", "connections", "create_with", "engines_per_process")


@dataclass(frozen=True)
class CapabilityStatus:
    capability: Capability
    present: bool | None  # None: a session capability not checked (no session was opened)
    declared: str = ""  # the word declared, for a capability that is one (see DECLARED_WORDS)

    @property
    def name(self) -> str:
        return self.capability.name

    @property
    def disabled(self) -> str:
        """The faults or checks that cannot run because it is missing ("" if none, or if present)."""
        return self.capability.disables if self.present is False else ""

    def line(self) -> str:
        c = self.capability
        if self.present:
            return f"  yes  {c.name} = {self.declared!r}" if self.declared else f"  yes  {c.name}"
        if self.present is None:
            return f"  ?    {c.name}: a session capability, known once a session opens (python -m chaos adapter)"
        effect = f"this disables {c.disables}" if c.disables else f"default: {c.default}"
        return f"  no   {c.name}: {effect}; offer {c.offers}"


# The methods each session capability of CAPABILITIES is (one entry for every one of them: a
# capability left out is never known, and python -m chaos adapter showed it as "?").
SESSION_METHODS = {"connection": ("connection",), "claim_only": ("claim_only",),
                   "human_actions": ("requeue", "resolve", "cancel"), "busy_timeout": ("set_busy_timeout",),
                   "configure_worker": ("configure_worker",)}


def session_capabilities(session: Any) -> dict[str, bool]:
    """Which session capabilities ``session`` has (a capability of several methods needs them all)."""
    return {name: all(callable(getattr(session, m, None)) for m in methods) for name, methods in SESSION_METHODS.items()}


def capabilities(adapter: Adapter, session: Any = None, *, session_has: Mapping[str, bool] | None = None) -> list[CapabilityStatus]:
    """Each optional capability, whether ``adapter`` (and ``session``, if given) offers it.

    Session capabilities come from ``session_has`` (as :func:`session_capabilities` gives them for
    a session opened elsewhere), else from ``session``, else from the adapter's ``session_type``
    where it names one (``open`` returns instances of it), else they are reported as unknown.
    """
    from chaos.core.target import offered  # the one rule for what an adapter offers, which a resolved target holds

    probe_session = session if session is not None else getattr(adapter, "session_type", None)
    has = dict(session_has) if session_has is not None else session_capabilities(probe_session) if probe_session is not None else {}
    offers = offered(adapter)
    return capability_statuses(offers, {n: getattr(adapter, n) for n in DECLARED_WORDS if n in offers}, has)


def capability_statuses(offered: Collection[str], words: Mapping[str, str], session_has: Mapping[str, bool]) -> list[CapabilityStatus]:
    """Each optional capability's status, given the adapter-level ones ``offered`` (by name), the
    ``words`` declared (name -> word) and the session capabilities found (``session_has``; one it
    does not name is unknown)."""
    out = []
    for c in CAPABILITIES:
        present: bool | None
        present = c.name in offered if c.where == "adapter" else session_has.get(c.name)
        if c.name == "connection" and words.get("connections") == "pool":
            present = True  # the harness finds the pool's connections itself (chaos.core.pool)
        out.append(CapabilityStatus(c, present, str(words.get(c.name, ""))))
    return out


def describe_capabilities(adapter: Adapter, session: Any = None, *, session_has: Mapping[str, bool] | None = None,
                          missing_only: bool = False) -> list[str]:
    """One line per capability (or per missing one): offered, or what its absence disables."""
    return [s.line() for s in capabilities(adapter, session, session_has=session_has) if not (missing_only and s.present)]


REQUIRED = ("states", "settled_states", "final_effects", "step_states", "trace_paths", "targets", "create", "open", "inspect")


def load_adapter(spec: str) -> Adapter:
    """Import ``module:attribute`` and return the adapter it names: an adapter, an adapter class
    (instantiated with no arguments), or a function that takes no arguments and returns one.

    The target is checked before it is called: a class must have every required method, a
    function (one written in Python) must take no arguments, and anything else must be an adapter
    itself. Calling first would run whatever the spec names (``os:abort`` ended the process with
    SIGABRT and no message). Raises ValueError, naming the target and the fix, for a spec that
    does not load, is not an adapter, or whose class or function fails.
    """
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"target {spec!r} must look like MODULE:ATTR, e.g. {REFERENCE_TARGET}")
    if module_name.startswith("."):
        raise ValueError(f"target {spec!r} names a relative module; name it from the top, e.g. mypackage.adapters:{attr}")
    try:
        target = getattr(importlib.import_module(module_name), attr)
    except (Exception, SystemExit) as exc:  # whatever importing someone else's module raises (sys.exit too), it is one line here
        why = f"importing it called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else f"{type(exc).__name__}: {exc}"
        raise ValueError(f"cannot load target {spec!r}: {why}") from exc
    if isinstance(target, type) or _inspect_module.isfunction(_inspect_module.unwrap(target)):  # a decorator's wrapper too
        _check_callable_target(spec, target)
        try:
            adapter = target()
        except (Exception, SystemExit) as exc:
            raise ValueError(
                f"target {spec!r}: calling it to make the adapter failed ({type(exc).__name__}: {exc}); fix it, or name "
                "an adapter, or a class or function that takes no arguments and returns one (see chaos.adapter.Adapter)"
            ) from exc
    else:
        adapter = target
    missing = _missing(adapter)
    if missing:
        lacks = "" if len(missing) == len(REQUIRED) + 2 else f", it has no {', '.join(map(repr, missing))}"
        what = f"it is {_what(adapter)}" if adapter is target else f"calling it gave {_what(adapter)}"
        raise ValueError(f"target {spec!r} is not an adapter: {what}{lacks} ({NOT_AN_ADAPTER_FIX})")
    return adapter


NOT_AN_ADAPTER_FIX = (
    "name an adapter class, an instance of one, or a function that takes no arguments and returns one: "
    "see chaos.adapter.Adapter"
)


def _check_callable_target(spec: str, target: Any) -> None:
    """Refuse a class that is not an adapter class, or a function that needs arguments, uncalled."""
    if isinstance(target, type):
        methods = [name for name in REQUIRED if not callable(getattr(target, name, None))]
        if methods:
            lacks = "" if len(methods) == len(REQUIRED) else f", it has no {', '.join(map(repr, methods))}"
            raise ValueError(f"target {spec!r} is not an adapter: it is {_what(target)}{lacks} ({NOT_AN_ADAPTER_FIX})")
    try:
        signature = _inspect_module.signature(target)
    except (TypeError, ValueError):  # a class whose signature Python cannot tell: calling it says the rest
        return
    needed = [p.name for p in signature.parameters.values() if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if needed:
        raise ValueError(
            f"target {spec!r} is not an adapter: it is {_what(target)}, which needs arguments ({', '.join(needed)}) where the "
            f"harness passes none ({NOT_AN_ADAPTER_FIX})"
        )


def _missing(adapter: Any) -> list[str]:
    missing = [name for name in REQUIRED if not callable(getattr(adapter, name, None))]
    return missing + [name for name in ("name", "lease_s") if not hasattr(adapter, name)]


def _what(value: Any) -> str:
    """What a target is, as an error names it: ``class X``, ``function f``, ``a built-in function``."""
    if isinstance(value, type):
        return f"class {value.__qualname__}"
    if _inspect_module.isfunction(value):
        return f"function {value.__qualname__}"
    if value is None:
        return "None"
    if _inspect_module.isbuiltin(value):
        return "a built-in function"
    return f"an object of type {type(value).__qualname__}"
