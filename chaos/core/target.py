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
    JOB_REF, JOBS_MAX, Adapter, CapabilityStatus, ServerDatabases, allowed_effects, capabilities, default_job_ids, load_adapter,
    sending_steps, server_databases,
)
from chaos.core.hangs import check_timeout
from chaos.core.models import (
    Connections, EnginesPerProcess, Iteration, Receiver, Recovery, TimeSource, connections_model, engines_per_process,
    iteration_model, receiver_model, recovery_model, time_source,
)

__all__ = ["SUBMIT_CONFLICTS", "Target", "default_payload", "load_target", "resolve"]

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

    def resolve_jobs(self, text: str) -> str:
        """``text`` with every ``<job N>`` replaced by the N-th job id (:func:`chaos.adapter.resolve_jobs`)."""
        positions = [int(p) for p in JOB_REF.findall(text)]
        if not positions:
            return text
        ids = self.job_ids(max(positions))
        return JOB_REF.sub(lambda m: ids[int(m.group(1)) - 1], text)

    def capabilities(self, session: Any = None, *, session_has: Mapping[str, bool] | None = None) -> list[CapabilityStatus]:
        """Each optional capability, whether the adapter offers it (:func:`chaos.adapter.capabilities`)."""
        return capabilities(self.adapter, session, session_has=session_has)


def load_target(spec: str) -> Target:
    """The target ``spec`` (``module:attribute``) names, loaded (:func:`chaos.adapter.load_adapter`) and resolved."""
    return resolve(load_adapter(spec))


def resolve(adapter: Adapter | Target) -> Target:
    """``adapter`` resolved into a :class:`Target` (a target comes back as it is).

    Raises ValueError, naming the adapter and the fix, for a declared word it does not know, an
    ``allowed_effects`` entry that is not ``KIND:PATTERN``, a ``submit_conflict`` other than
    ``raises`` or ``first-wins``, or a ``scenario_timeout_s`` that is no number of seconds.
    """
    if isinstance(adapter, Target):
        return adapter
    name = getattr(adapter, "name", type(adapter).__name__)
    policy = getattr(adapter, "submit_conflict", None) or "raises"
    if policy not in SUBMIT_CONFLICTS:
        raise ValueError(f"adapter {name!r}: submit_conflict is {policy!r}; use 'raises' or 'first-wins'")
    declared_s = getattr(adapter, "scenario_timeout_s", None)
    if declared_s is not None:
        declared_s = check_timeout(declared_s, "the adapter's scenario_timeout_s")
    tasks, initial, needs_human = _optional(adapter, "tasks"), _optional(adapter, "initial_states"), _optional(adapter, "needs_human_states")
    table = adapter.states()
    return Target(
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
        iteration=iteration_model(adapter), recovery=recovery_model(adapter), time_source=time_source(adapter),
        connections=connections_model(adapter), engines_per_process=engines_per_process(adapter),
        receiver=receiver_model(adapter),
        tasks=dict(tasks()) if tasks is not None else {},
        initial=frozenset(initial()) if initial is not None else
        frozenset({"pending"}) if "pending" in table or not table else frozenset(list(table)[:1]),
        needs_human=frozenset(needs_human()) if needs_human is not None else frozenset({"needs_human"} & set(table)),
        fault_errors=getattr(adapter, "fault_errors", None),
        schema=getattr(adapter, "schema", None),
        server=server_databases(adapter),
        allowed_effects=allowed_effects(adapter),
        sent_by=sending_steps(adapter),
        scenarios=_optional(adapter, "scenarios"),
        scenario_timeout_s=declared_s,
        release=_optional(adapter, "release"),
        copy_db=_optional(adapter, "copy_db"),
        check_declaration=_optional(adapter, "check_declaration"),
        use_database=_optional(adapter, "use_database"),
        fault_tasks=_optional(adapter, "fault_tasks"),
        session_type=getattr(adapter, "session_type", None),
    )


def _optional(adapter: Any, name: str) -> Callable[..., Any] | None:
    """The adapter's method ``name``, or None where it offers none."""
    hook = getattr(adapter, name, None)
    return hook if callable(hook) else None


def _takes_writers(create: Callable[..., None]) -> bool:
    try:
        return "attribute_writers" in inspect.signature(create).parameters
    except (TypeError, ValueError):  # a callable whose signature Python cannot tell
        return False
