"""The ``power`` fault at a point: kill the worker, cut the power, bring it back, recover, check.

The scenario's database lives on an ext4 image of its own (:class:`chaos.hostfaults.power.PowerImage`),
copied there from the family's template and fsynced (what was set up before the point had long
reached the disk); the world's ledger, which stands for the outside world (the model provider
that was paid, the receiver that applied an effect), stays on the ordinary disk and survives. At
the point the worker dies by SIGKILL, as in a crash; then the harness reads what had been
acknowledged, cuts the power (``EXT4_IOC_SHUTDOWN``, journal unflushed), unmounts, mounts, reads
what survived, and recovers from that with a fresh worker and the sender. Checked
(:mod:`chaos.hostfaults.power_checks`): ``integrity``, ``durable-commits`` under FULL, and the whole
invariant catalog once the system drained, with every memo row the cut took counted as an
interruption of its step.

The adapter's stores run at the sub-kind's level: ``power-full`` at ``synchronous=FULL``,
``power-normal`` at ``NORMAL``, through the adapter's ``synchronous`` attribute (the reference
adapter's :meth:`make_store` reads it). An adapter whose databases are not files (PostgreSQL) is
refused here: its power cut is measured by ``python -m benchmarks`` (:mod:`chaos.hostfaults.power_runs`).
"""

from __future__ import annotations

import copy
import os
import shutil
import time
from typing import Any, TYPE_CHECKING

from chaos.core.invariants import check
from chaos.hostfaults.checks import integrity
from chaos.core.points import Point
from chaos.hostfaults.power import LEVEL_OF, PowerImage, PowerUnavailable, power_missing, sync_tree
from chaos.hostfaults.power_checks import durable_commits, lost_commits, lost_interruptions, read_acknowledged
from chaos.core.invariants import raised
from chaos.core.kill import kill_at
from chaos.core.scenario import Family, Outcome, Run
from chaos.core.target import resolve
from chaos.core.template import copy_template
from chaos.core.settle import recover_and_check
from chaos.core.verdict import steps_in_flight

if TYPE_CHECKING:
    from chaos.adapter import Adapter
    from chaos.core.target import Target

__all__ = ["at_level", "run_power_cut"]

ENGINE_FILES = ("engine.db", "engine.db-wal")


def at_level(adapter: Adapter | Target, level: str) -> Target:
    """A copy of ``adapter`` whose stores commit at ``synchronous=level``, resolved.

    The level is an attribute of the user's adapter, which its ``make_store`` reads: the copy is of
    the adapter inside the target, resolved again so that every method the target holds is the copy's.

    >>> from chaos.adapters.reference import ReferenceAdapter
    >>> at_level(resolve(ReferenceAdapter()), "FULL").adapter.synchronous
    'FULL'
    """
    target = resolve(adapter)  # a target comes back as it is
    if not hasattr(target.adapter, "synchronous"):
        raise ValueError(
            f"adapter {type(target.adapter).__name__} declares no 'synchronous' attribute, so the power fault cannot run its "
            "stores at FULL or NORMAL; give it one that its make_store passes to SqliteStore(synchronous=...)"
        )
    if target.server is not None:
        raise ValueError(
            "the power fault runs on SQLite files, which it puts on an ext4 image whose power it cuts; on PostgreSQL "
            "the server writes the files: run python -m benchmarks for PostgreSQL's power-cut figures, and power on SQLite"
        )
    leveled = copy.copy(target.adapter)
    leveled.synchronous = level
    return resolve(leveled)


def run_power_cut(adapter: Adapter, family: Family, point: Point, workdir: str, *, seed: int, fault: str, deep: bool = True) -> Outcome:
    """Kill the doomed iteration at ``point``, cut the power, restore it, recover, check."""
    if fault not in LEVEL_OF:
        raise ValueError(f"power fault {fault!r} is not one of: {', '.join(LEVEL_OF)}")
    reason = power_missing()
    if reason:
        raise PowerUnavailable(reason)
    level = LEVEL_OF[fault]
    leveled = at_level(adapter, level)
    started = time.perf_counter()
    directory = os.path.join(workdir, "point")
    with PowerImage(workdir) as image:
        copy_template(family, directory)
        for name in ENGINE_FILES:  # the engine's files move onto the image; the world's stay here
            if os.path.exists(os.path.join(directory, name)):
                shutil.move(os.path.join(directory, name), os.path.join(image.mount, name))
        sync_tree(image.mount)
        db = os.path.join(image.mount, "engine.db")
        run = Run(leveled, directory, family.clock_after_setup, seed, family.scenario, db)
        try:
            exit_kind, error = kill_at(run, point, deep=deep)
            acknowledged = read_acknowledged(leveled, db)  # through the page cache: every commit that returned
            _let_go(run)
            image.cut()
            image.restore()
            survived = leveled.inspect(db)
            problems = integrity(db) + durable_commits(level, acknowledged, survived)
            lost = lost_commits(acknowledged, survived)
            interruptions = steps_in_flight(run, acknowledged) + lost_interruptions(acknowledged, survived, _working(leveled))
            after_cut = check(run.evidence(family.submitted, interruptions, survived), at_rest=False)
            outcome = recover_and_check(run, family, interruptions, point.id, exit_kind)
        finally:
            run.close()
    if error:
        outcome.error = error
        problems.insert(0, raised("the doomed iteration", error))
    seen = {str(v) for v in outcome.violations}
    outcome.violations = [v for v in problems + after_cut if str(v) not in seen] + outcome.violations
    outcome.fault = fault
    outcome.lost_commits = lost
    outcome.seconds = time.perf_counter() - started
    return outcome


def _working(adapter: Adapter) -> dict[str, str]:
    """working state -> step, from the adapter's declared step states."""
    return {working: step for step, (working, _) in adapter.step_states().items()}


def _let_go(run: Run) -> None:
    """Close every file the harness holds on the image: the power cut must find them closed, so
    that the mount after it is a fresh one (a file still open keeps the dead file system alive)."""
    if run.adapter.release is not None:
        run.adapter.release(run.db)
    close_probe = getattr(run.world.probe, "close", None)
    if close_probe is not None:
        close_probe()

