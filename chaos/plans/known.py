"""The known findings of a fault plan: its items run outside pytest, their violations as keys.

``python -m chaos baseline --plan fault_plans/every_line.toml > crashgate-baseline.json`` writes
the file ``--chaos-baseline`` reads, keyed as the pytest plugin keys a plan item's violations:
the family is the plan's name, the fault the item's kind (``crash``, ``pause-live``, ...; "" for
the plan's baseline item), the invariant, and the cause (:func:`chaos.core.findings.normalise`).
"""

from __future__ import annotations

import os
import shutil

from chaos.adapter import load_adapter
from chaos.core.findings import KnownKey, normalise
from chaos.plans.plan import check_against, load_plan
from chaos.plans.runner import prepare_points, run_plan_point, select_items

__all__ = ["plan_known_keys"]


def plan_known_keys(path: str, target: str, *, seed: int, mode: str, faults: tuple[str, ...], pairs: int,
                    selection: str = "all") -> tuple[str, set[KnownKey]]:
    """Run the plan's baseline and its items (``selection``: ``all`` or a seeded sample of N, as
    ``--chaos-points``); return the target it ran on (the plan's own, else ``target``) and the
    keys of every violation. ``faults`` are for a plan without a ``fault`` key, as ``--chaos-faults``.
    Raises :class:`chaos.plans.plan.PlanError` (a ValueError) for a plan that cannot run."""
    from chaos.matrix.work import scratch_dir

    plan = load_plan(path, shown=path)
    target = plan.target or target
    adapter = load_adapter(target)
    check_against(plan, adapter)
    if plan.points is None:  # scripted scenarios only: no item is keyed (see the plugin's verdict)
        return target, set()
    kinds = plan.points.fault if plan.points.fault is not None else faults
    workdir = scratch_dir()
    try:
        prepared = prepare_points(plan, adapter, os.path.join(workdir, "plan"), seed=seed, faults=kinds)
        keys = {(plan.name, "", v.invariant, normalise(v.detail)) for v in prepared.family.baseline.violations}
        items = select_items(prepared, selection, seed=seed, faults=kinds, pairs=pairs).items
        for item in items:
            outcome, _ = run_plan_point(prepared, item.index, adapter, os.path.join(workdir, "points"), seed=seed, mode=mode,
                                        fault=item.fault, second=item.second)
            keys |= {(plan.name, item.fault, v.invariant, normalise(v.detail)) for v in outcome.violations}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return target, keys
