"""The door of a crash-matrix run: what it is given checked, and the target resolved once.

:func:`set_up` checks the fault kinds, the point, the families, the mode and the database a run is
given, loads and resolves the target (:func:`chaos.core.target.resolve`: its declared words, its
submit_conflict, its allowed effects and its scenario bound checked) and picks the scenario
families; a :class:`ValueError` it raises is the caller's input, never the run's, and says the fix.
Nothing below the door asks the adapter again: it reads the :class:`chaos.core.target.Target`.

>>> set_up("chaos:reference_adapter", mode="fork", families=None, point=None, scenarios=None, faults=(),
...        db=None, replay_db=None)
Traceback (most recent call last):
...
ValueError: no fault kind given; pass at least one of: crash, pause, interleave, disk, io, lock, clock, damage, power, e.g. crash
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from chaos.core import libfiu
from chaos.core.scenario import Scenario, for_adapter
from chaos.core.target import Target, load_target, resolve
from chaos.hostfaults.faults import KIND_OF, MACHINE_FAULTS, expand, machine_scenarios, refuse_on_a_server, refuse_without_schema
from chaos.hostfaults.power import power_missing
from chaos.matrix.families import reference_scenarios

__all__ = ["DEFAULT_SEED", "FAULTS", "MatrixUsageError", "PAIRS_DEFAULT", "Setup", "set_up"]

DEFAULT_SEED = 0
# Machine faults (disk, io, lock, clock, damage) name several sub-kinds each; a sub-kind
# (e.g. clock-skew) is accepted on its own too, as a replay command names it.
FAULTS = ("crash", "pause", "interleave") + tuple(MACHINE_FAULTS)
PAIRS_DEFAULT = 200


def set_up(target: Any, *, mode: str, families: Iterable[str] | None, point: str | None, scenarios: list[Scenario] | None,
           faults: tuple[str, ...], db: str | None, replay_db: tuple[str, ...] | None) -> "Setup":
    """Everything a run is given checked, and its adapter and families: a :class:`ValueError` here
    is the caller's input (a fault kind, a point, a family, a target, a declaration), never the run's."""
    if not faults:  # a run of nothing would report no violation: a gate that passes having checked nothing
        raise ValueError(f"no fault kind given; pass at least one of: {', '.join(FAULTS)}, e.g. crash")
    if point is not None and not point:
        raise ValueError("point '' names no scenario; pass FAMILY::POINT as a replay command prints it, or no point at all")
    unknown = sorted(set(faults) - set(FAULTS) - set(KIND_OF))
    if unknown:
        raise ValueError(f"fault kinds {unknown} are not known; choose from: {', '.join(FAULTS)} (or a sub-kind: {', '.join(KIND_OF)})")
    machine = [sub for f in faults for sub in expand(f)]
    if isinstance(target, str):
        refuse_on_a_server(machine, db)  # disk and io act on SQLite files; lock, clock and damage run on PostgreSQL too
    # The door: the target loaded and resolved once (its declared words, its submit_conflict, its
    # allowed_effects and its scenario_timeout_s checked); nothing below asks the adapter again.
    adapter = load_target(target) if isinstance(target, str) else resolve(target)
    raw = adapter.adapter
    target_name = target if isinstance(target, str) else f"{type(raw).__module__}:{type(raw).__name__}"
    if not isinstance(target, str):
        refuse_on_a_server(machine, db, adapter)
    # What the machine lacks comes after what the target cannot do: io on a server is refused as such, libfiu or not.
    if any(KIND_OF[sub] == "io" for sub in machine) and libfiu.missing():
        raise ValueError(libfiu.missing())
    if any(KIND_OF[sub] == "power" for sub in machine) and power_missing():
        raise ValueError(power_missing())
    if "crash" in faults and mode not in ("fork", "inprocess"):
        raise ValueError(f"mode {mode!r} is not one of: fork, inprocess")
    if db is not None:
        if adapter.use_database is None:
            raise ValueError(f"target {target_name!r} takes no --db: its scenario databases are files")
        adapter.use_database(db)
    refuse_without_schema(machine, adapter, target_name, db)
    if adapter.check_declaration is not None:  # a declaration that does not match the engine: the adapter's mistake, said before any run
        adapter.check_declaration()
    replay_extra = replay_db if replay_db is not None else (("--db", db) if db is not None else ())
    all_scenarios = scenarios if scenarios is not None else (adapter.scenarios or reference_scenarios)()
    all_scenarios = [for_adapter(s, adapter) for s in all_scenarios]
    if scenarios is None and machine:
        all_scenarios = list(all_scenarios) + [for_adapter(s, adapter) for s in machine_scenarios()
                                               if s.name not in {a.name for a in all_scenarios}]
    wanted = set(families) if families is not None else None
    only_family, _, only_point = (point or "").partition("::")
    if point and not only_point:
        raise ValueError(f"point {point!r} must look like FAMILY::POINT, e.g. clean::_worker.run_once:L120#1")
    chosen = [s for s in all_scenarios if (wanted is None or s.name in wanted) and (not point or s.name == only_family)]
    if not chosen:
        names = ", ".join(s.name for s in all_scenarios)
        if point and wanted is not None and only_family not in wanted and only_family in {s.name for s in all_scenarios}:
            raise ValueError(f"point {point!r} is in family {only_family!r}, which the families asked for ({', '.join(sorted(wanted))}) "
                             "leave out; give the point alone, or its family")
        raise ValueError(f"no scenario family matches {sorted(wanted or {only_family})}; families: {names}")
    return Setup(adapter, target_name, chosen, tuple(replay_extra), only_family, only_point)


@dataclass(frozen=True)
class Setup:
    """A run's input as the door checked it: the resolved target, the name replay commands give it,
    the families chosen, what replay commands end with, and the one point asked for (if any)."""

    adapter: Target
    target_name: str
    chosen: list[Scenario]
    replay_extra: tuple[str, ...]
    only_family: str
    only_point: str


class MatrixUsageError(ValueError):
    """What :func:`chaos.matrix.runner.run_matrix` was given cannot be run (the message names the input and the fix)."""
