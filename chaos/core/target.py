"""A target, resolved once at the door: the adapter, and everything it offers or the default for it.

The contract (:mod:`chaos.adapter`) is a small required protocol and optional capabilities, each
with a documented default. Asked again wherever it is needed, an optional capability is a
``getattr`` every phase repeats, and a declared word a phase does not check is a mistake found
late. So a target is resolved once, where a run is given it (``run_matrix``, the plugin, the
command line, a history, a fault plan), into a :class:`Target`: the adapter's required methods,
each optional capability as what the adapter offers or its default, each declared model parsed
and checked (:mod:`chaos.core.models`). Everything below that door reads the target, never the
raw adapter.

A :class:`Target` keeps the adapter's required methods under their own names (bound to the
adapter), so code that drives an engine reads the same with either; it imports only the contract
and the core's leaves, so every phase can name it without an import circle.

>>> from chaos.adapter import load_adapter
>>> target = resolve(load_adapter("chaos:reference_adapter"))
>>> target.iteration, target.recovery, target.receiver
(<Iteration.ONE_CALL: 'one-call'>, <Recovery.LEASE_EXPIRY: 'lease-expiry'>, <Receiver.DEDUPES: 'dedupes'>)
>>> target.job_ids(2), target.payload("doc-1"), resolve(target) is target
(('doc-1', 'doc-2'), {'source': 'doc-1'}, True)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from chaos.adapter import (
    CAPABILITIES, DECLARED_WORDS, JOB_REF, JOBS_MAX, Adapter, CapabilityStatus, ServerDatabases, allowed_effects, capability_statuses,
    default_job_ids, load_adapter, sending_steps, server_databases, session_capabilities,
)
from chaos.core.hangs import check_timeout
from chaos.core.models import (
    Connections, CreateWith, EnginesPerProcess, Iteration, Receiver, Recovery, TimeSource, connections_model, create_with_model,
    engines_per_process, iteration_model, receiver_model, recovery_model, time_source,
)

__all__ = ["SUBMIT_CONFLICTS", "Target", "UnresolvedTarget", "default_payload", "examine", "load_target", "offered", "resolve"]

SUBMIT_CONFLICTS = ("raises", "first-wins")


def default_payload(job_id: str) -> dict[str, str]:
    """What the harness submits for ``job_id`` where the adapter has no ``payload``: what the reference workflow's fetch step reads."""
    return {"source": job_id}


class _JobIds:
    """The adapter's ``job_ids(n)``, checked (n distinct non-empty strings), or ``doc-1`` .. ``doc-n``."""

    def __init__(self, hook: Callable[[int], Any] | None, name: str) -> None:
        self.hook = hook
        self.name = name

    def __call__(self, n: int) -> tuple[str, ...]:
        if not 0 <= n <= JOBS_MAX:
            raise ValueError(f"a scenario submits between 0 and {JOBS_MAX} jobs, not {n}")
        if self.hook is None:
            return default_job_ids(n)
        ids = tuple(self.hook(n))
        if len(ids) != n or len(set(ids)) != n or not all(isinstance(i, str) and i for i in ids):
            raise ValueError(f"adapter {self.name!r}: job_ids({n}) returned {list(ids)[:5]!r}{'...' if len(ids) > 5 else ''}; "
                             f"return {n} distinct non-empty strings, e.g. [f'order-{{1000 + i}}' for i in range(1, n + 1)]")
        return ids


class _Create:
    """The adapter's ``create``, given ``attribute_writers`` only where it takes it (the writer attribution)."""

    def __init__(self, create: Callable[..., None], attributes: bool) -> None:
        self.create = create
        self.attributes = attributes

    def __call__(self, db_path: str, *, attribute_writers: bool = True) -> None:
        if attribute_writers and self.attributes:
            self.create(db_path, attribute_writers=True)
        else:
            self.create(db_path)


@dataclass(frozen=True, eq=False)
class Target:
    """An adapter with each optional capability resolved: what every phase below the door reads.

    The required part keeps the protocol's names (``states()``, ``open(...)``, ``inspect(db)``,
    ...); ``create(db, attribute_writers=True)`` installs the writer triggers where the adapter
    offers them. The optional part is values: a callable where the capability is one (``payload``,
    ``job_ids``), ``None`` where a capability that has no default is missing (``probe``,
    ``schema``, ``server``), and each declared word as its model's member.
    """

    adapter: Any
    name: str
    lease_s: float
    # The required protocol, bound to the adapter.
    states: Callable[[], Mapping[str, Any]]
    settled_states: Callable[[], frozenset[str]]
    final_effects: Callable[[], Mapping[str, Any]]
    step_states: Callable[[], Mapping[str, tuple[str, str]]]
    trace_paths: Callable[[], list[str]]
    targets: Callable[[], dict[str, Callable[..., Any]]]
    open: Callable[..., Any]
    inspect: Callable[[str], Any]
    create: Callable[..., None]
    # The optional capabilities, resolved.
    attributes_writers: bool  # create takes attribute_writers (the fenced-writes check can run)
    payload: Callable[[str], Any]
    job_ids: Callable[[int], tuple[str, ...]]
    poison_payload: Callable[[str], Any] | None
    probe: Callable[[str], Any] | None  # probe(db) -> fn(job, step, worker, token, now) -> (memo committed, lease valid)
    conflict_errors: tuple[type[BaseException], ...]
    human_errors: tuple[type[BaseException], ...]
    unavailable_errors: tuple[type[BaseException], ...]  # what a session raises while its store is unreachable (histories)
    submit_conflict: str  # "raises" or "first-wins"
    iteration: Iteration
    recovery: Recovery
    time_source: TimeSource
    connections: Connections
    engines_per_process: EnginesPerProcess
    create_with: CreateWith
    receiver: Receiver
    tasks: Mapping[str, str]  # the reference's task names -> the adapter's
    initial: frozenset[str]  # the states a job may be created in
    needs_human: frozenset[str]  # the states in which a job waits for a person
    fault_errors: Mapping[str, Callable[..., BaseException]] | None
    schema: Any | None
    server: ServerDatabases | None  # where its databases live on a server (template_db, new_scenario_db, drop_db)
    allowed_effects: tuple[Any, ...]  # parsed (chaos.core.effects.Allowed)
    sent_by: Mapping[str, str]  # effect kind -> the step that sends it itself (sends_from_steps turned around)
    scenarios: Callable[[], list[Any]] | None
    scenario_timeout_s: float | None
    release: Callable[[str], None] | None
    copy_db: Callable[..., Any] | None
    check_declaration: Callable[[], None] | None
    use_database: Callable[[str], None] | None
    fault_tasks: Callable[[], Any] | None
    session_type: Any | None
    # The optional capabilities the adapter offers itself (by name, as chaos.adapter.CAPABILITIES
    # names them); every other one is its default above.
    offered: frozenset[str]

    def resolve_jobs(self, text: str) -> str:
        """``text`` with every ``<job N>`` replaced by the N-th job id (:func:`chaos.adapter.resolve_jobs`)."""
        positions = [int(p) for p in JOB_REF.findall(text)]
        if not positions:
            return text
        ids = self.job_ids(max(positions))
        return JOB_REF.sub(lambda m: ids[int(m.group(1)) - 1], text)

    def words(self) -> dict[str, str]:
        """Each model the adapter declares in a word (:data:`chaos.adapter.DECLARED_WORDS`), as resolved."""
        return {name: str(getattr(self, name)) for name in DECLARED_WORDS if name in self.offered}

    def capabilities(self, session: Any = None, *, session_has: Mapping[str, bool] | None = None) -> list[CapabilityStatus]:
        """Each optional capability as resolved: offered by the adapter (a declared word with its
        word), or its default. The session's come from ``session_has`` (as
        :func:`chaos.core.capabilities.open_and_ask` finds them), else from ``session``, else from
        the adapter's ``session_type``, else they are unknown."""
        probe_session = session if session is not None else self.session_type
        has = dict(session_has) if session_has is not None else session_capabilities(probe_session) if probe_session is not None else {}
        return capability_statuses(self.offered, self.words(), has)


def load_target(spec: str) -> Target:
    """The target ``spec`` (``module:attribute``) names, loaded (:func:`chaos.adapter.load_adapter`) and resolved."""
    return resolve(load_adapter(spec))


class UnresolvedTarget(ValueError):
    """What resolving an adapter found wrong: every problem in ``problems``, each one line that names
    the adapter and the fix. Its message is the first, and how many more there are (``python -m
    chaos adapter`` lists them all)."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = tuple(problems)
        more = len(problems) - 1
        also = f" (and {more} more problem{'s' if more > 1 else ''}: python -m chaos adapter lists each)" if more else ""
        super().__init__(problems[0] + also)


def resolve(adapter: Adapter | Target) -> Target:
    """``adapter`` resolved into a :class:`Target` (a target comes back as it is).

    Raises :class:`UnresolvedTarget` (a ValueError), naming the adapter and the fix, for a
    declared word it does not know, an ``allowed_effects`` entry that is not ``KIND:PATTERN``, a
    ``sends_from_steps`` that names no step of its own, a ``submit_conflict`` other than ``raises``
    or ``first-wins``, or a ``scenario_timeout_s`` that is no number of seconds.
    """
    if isinstance(adapter, Target):
        return adapter
    target, problems = examine(adapter)
    if problems:
        raise UnresolvedTarget(problems)
    return target


def examine(adapter: Adapter) -> tuple[Target, list[str]]:
    """``adapter`` resolved, and every problem found on the way (see :func:`resolve`): each
    capability that has one is read whatever the others hold, a wrong one standing at its default
    in the target, so that all of them are said together.

    >>> from chaos.adapter import load_adapter
    >>> class Typos(type(load_adapter("chaos:reference_adapter"))):
    ...     receiver, submit_conflict = "exactly-once", "last-wins"
    >>> for problem in examine(Typos())[1]:
    ...     print(problem)
    adapter 'reference': submit_conflict is 'last-wins'; use 'raises' or 'first-wins'
    adapter 'reference': receiver is 'exactly-once'; use 'dedupes' (the default: the receiver applies each effect key once) or 'strict' (every delivery is applied)
    """
    name = getattr(adapter, "name", type(adapter).__name__)
    problems: list[str] = []

    def checked(read: Callable[[], Any], default: Any) -> Any:
        try:
            return read()
        except ValueError as exc:
            problems.append(str(exc))
            return default

    def conflict_policy() -> str:
        policy = getattr(adapter, "submit_conflict", None) or "raises"
        if policy not in SUBMIT_CONFLICTS:
            raise ValueError(f"adapter {name!r}: submit_conflict is {policy!r}; use 'raises' or 'first-wins'")
        return policy

    def declared_timeout() -> float | None:
        declared_s = getattr(adapter, "scenario_timeout_s", None)
        return None if declared_s is None else check_timeout(declared_s, "the adapter's scenario_timeout_s")

    policy = checked(conflict_policy, "raises")
    declared_s = checked(declared_timeout, None)
    tasks, initial, needs_human = _optional(adapter, "tasks"), _optional(adapter, "initial_states"), _optional(adapter, "needs_human_states")
    table = adapter.states()
    target = Target(
        adapter=adapter, name=name, lease_s=adapter.lease_s,
        states=adapter.states, settled_states=adapter.settled_states, final_effects=adapter.final_effects,
        step_states=adapter.step_states, trace_paths=adapter.trace_paths, targets=adapter.targets, open=adapter.open,
        inspect=adapter.inspect, create=_Create(adapter.create, _takes_writers(adapter.create)),
        attributes_writers=_takes_writers(adapter.create),
        payload=_optional(adapter, "payload") or default_payload,
        job_ids=_JobIds(_optional(adapter, "job_ids"), name),
        poison_payload=_optional(adapter, "poison_payload"),
        probe=_optional(adapter, "probe"),
        conflict_errors=tuple(getattr(adapter, "conflict_errors", None) or ()),
        human_errors=tuple(getattr(adapter, "human_errors", None) or ()),
        unavailable_errors=tuple(getattr(adapter, "unavailable_errors", None) or ()),
        submit_conflict=policy,
        iteration=checked(lambda: iteration_model(adapter), Iteration.ONE_CALL),
        recovery=checked(lambda: recovery_model(adapter), Recovery.LEASE_EXPIRY),
        time_source=checked(lambda: time_source(adapter), TimeSource.PASSED),
        connections=checked(lambda: connections_model(adapter), Connections.SESSION),
        engines_per_process=checked(lambda: engines_per_process(adapter), EnginesPerProcess.MANY),
        create_with=checked(lambda: create_with_model(adapter), CreateWith.CONNECTION),
        receiver=checked(lambda: receiver_model(adapter), Receiver.DEDUPES),
        tasks=dict(tasks()) if tasks is not None else {},
        initial=frozenset(initial()) if initial is not None else
        frozenset({"pending"}) if "pending" in table or not table else frozenset(list(table)[:1]),
        needs_human=frozenset(needs_human()) if needs_human is not None else frozenset({"needs_human"} & set(table)),
        fault_errors=getattr(adapter, "fault_errors", None),
        schema=getattr(adapter, "schema", None),
        server=server_databases(adapter),
        allowed_effects=checked(lambda: allowed_effects(adapter), ()),
        sent_by=checked(lambda: sending_steps(adapter), {}),
        scenarios=_optional(adapter, "scenarios"),
        scenario_timeout_s=declared_s,
        release=_optional(adapter, "release"),
        copy_db=_optional(adapter, "copy_db"),
        check_declaration=_optional(adapter, "check_declaration"),
        use_database=_optional(adapter, "use_database"),
        fault_tasks=_optional(adapter, "fault_tasks"),
        session_type=getattr(adapter, "session_type", None),
        offered=offered(adapter),
    )
    return target, problems


# The optional capabilities an adapter offers as a value (or a word) rather than a method: offered
# wherever it sets them.
VALUES = ("fault_errors", "schema", "scenario_timeout_s", "sends_from_steps", *DECLARED_WORDS)


def offered(adapter: Adapter) -> frozenset[str]:
    """The adapter-level capabilities of :data:`chaos.adapter.CAPABILITIES` that ``adapter`` offers
    itself (the others are their defaults): a method it has, a value or a word it sets, a ``create``
    that takes ``attribute_writers``, and ``conflict_errors`` (needed only where a different payload
    must be refused: a ``first-wins`` adapter has it by its word)."""
    out = set()
    for capability in CAPABILITIES:
        name = capability.name
        if capability.where != "adapter":
            continue
        if name == "writer_attribution":
            has = _takes_writers(adapter.create)
        elif name == "conflict_errors":
            has = bool(getattr(adapter, "conflict_errors", ())) or getattr(adapter, "submit_conflict", "raises") == "first-wins"
        elif name in VALUES:
            has = getattr(adapter, name, None) is not None
        else:
            has = callable(getattr(adapter, name, None))
        if has:
            out.add(name)
    return frozenset(out)


def _optional(adapter: Any, name: str) -> Callable[..., Any] | None:
    """The adapter's method ``name``, or None where it offers none."""
    hook = getattr(adapter, name, None)
    return hook if callable(hook) else None


def _takes_writers(create: Callable[..., None]) -> bool:
    try:
        return "attribute_writers" in inspect.signature(create).parameters
    except (TypeError, ValueError):  # a callable whose signature Python cannot tell
        return False
