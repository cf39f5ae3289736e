"""The fault-plan collector: pytest collects every ``fault_plans/*.toml`` as a test file
(:class:`PlanFile`), a plan's points prepared once per process and grouped by the step the job was
in (:class:`PlanGroup`), each point and fault one item (:mod:`chaos.plugin.items`).

A plan that does not load, or whose target does not, is a collection error that names the plan,
the target and where the target was set.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from chaos.plugin.items import PlanBaseline, PlanPoint, PlanScenario
from chaos.plugin.state import plugin_state

__all__ = ["PLAN_DIR", "PlanFile", "PlanGroup"]

PLAN_DIR = "fault_plans"


def pytest_collect_file(file_path: Any, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".toml" and file_path.parent.name == PLAN_DIR:
        return PlanFile.from_parent(parent, path=file_path)
    return None


class PlanFile(pytest.File):
    """``fault_plans/NAME.toml``: a baseline, a group per step with an item per point, scenarios."""

    pairs_possible = 0  # interleaving pairs of the plan's points, when it interleaves
    points_possible = 0  # the items a sample (--chaos-points N) was drawn from; 0 when every one was collected

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        from chaos.plans.runner import select_items
        from chaos.plans.plan import PlanError, check_against, load_plan

        state = plugin_state(self.config)
        shown = self.nodeid or str(self.path)
        try:
            plan = load_plan(self.path, shown=shown)
            target = plan.target or state.settings.target
            try:
                adapter = state.adapter(target)
            except ValueError as exc:  # named where it was set: the plan's own key, or the run's setting
                source = "the plan's key 'target'" if plan.target else state.settings.sources.get("target", "the settings")
                raise ValueError(f"{shown}: target {target!r} (from {source}): {exc}") from None
            check_against(plan, adapter)
            self.plan, self.target = plan, target
            prepared = state.prepared(plan, target, self.faults()) if plan.points is not None else None
        except (PlanError, ValueError) as exc:
            raise self.CollectError(str(exc)) from None
        if prepared is not None:
            yield PlanBaseline.from_parent(self, name="baseline", prepared=prepared)
            s = state.settings
            chosen, self.pairs_possible, of = select_items(prepared, s.points, seed=s.seed, faults=self.faults(), pairs=s.pairs)
            self.points_possible = of if of > len(chosen) else 0
            for group in prepared.group_names():
                items = [item for item in chosen if prepared.groups[item.index] == group]
                if items:
                    yield PlanGroup.from_parent(self, name=group, prepared=prepared, items=items)
        for scenario in plan.scenarios:
            yield PlanScenario.from_parent(self, name=scenario.name, scenario=scenario)


    def faults(self) -> tuple[str, ...]:
        """The plan's fault kinds: its own ``fault`` key, else the ``--chaos-faults`` setting."""
        section = self.plan.points
        own = section.fault if section is not None else None
        return own if own is not None else plugin_state(self.config).settings.faults


class PlanGroup(pytest.Collector):
    """``PLAN::GROUP``: the points reached while the job was in one step (or claim, release, send)."""

    def __init__(self, *, prepared: Any, items: list[Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prepared = prepared
        self.items = items

    def collect(self) -> Iterator[pytest.Item]:
        from chaos.plans.runner import item_name

        points = self.prepared.family.points
        for item in self.items:
            second = points[item.second] if item.second >= 0 else None
            name = item_name(points[item.index], item.fault, second)
            yield PlanPoint.from_parent(self, name=name, prepared=self.prepared, index=item.index, fault=item.fault, second=item.second)
