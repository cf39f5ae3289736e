"""A parsed fault plan: :class:`Plan`, its ``[points]`` section, its scripted scenarios, their
actions, faults and expectations, each a frozen dataclass; and :class:`PlanError`, a plan that
cannot be run.

>>> Plan(path="fault_plans/poison.toml", lesson="A poison input is parked.").name
'poison'
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = ["PlanError", "Expect", "FaultSpec", "PointsSection", "Action", "ScriptedScenario", "Plan"]


class PlanError(ValueError):
    """A fault plan that cannot be run: the message names the file, the key and what is allowed."""


@dataclass(frozen=True)
class Expect:
    """What must be true at the end (or, in a script, at that moment)."""

    where: str
    state: str | None = None
    states: Mapping[str, str] = field(default_factory=dict)
    calls: Mapping[str, int] = field(default_factory=dict)
    applied: int | None = None
    wasted_max: int | None = None
    job_rows: int | None = None
    burst_max: Mapping[str, Any] | None = None
    call_gap_min: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class FaultSpec:
    kind: str
    task: str | None = None
    sticky: bool = False
    retry_after_s: float | None = None
    duration_s: float | None = None
    per_job: int = 0


@dataclass(frozen=True)
class PointsSection:
    jobs: tuple[str, ...] = ("<job 1>",)  # the target's first job (chaos.adapter.job_ref)
    setup: tuple[str, ...] = ()
    phase: str = "worker"
    faults: tuple[FaultSpec, ...] = ()
    second_worker: bool = False
    steps: tuple[str, ...] | None = None
    deep: bool = True
    fault: tuple[str, ...] | None = None  # None: the plugin's --chaos-faults setting decides
    expect: Expect | None = None


@dataclass(frozen=True)
class Action:
    """One line of a script: ``verb`` with its value, plus the keys the verb allows."""

    where: str
    verb: str
    value: Any
    options: Mapping[str, Any] = field(default_factory=dict)
    fault: FaultSpec | None = None
    expect: Expect | None = None


@dataclass(frozen=True)
class ScriptedScenario:
    name: str
    lesson: str
    jobs: tuple[str, ...]
    script: tuple[Action, ...]
    expect: Expect | None


@dataclass(frozen=True)
class Plan:
    """A parsed fault plan (checked against a target later, by :func:`check_against`).

    ``path`` is the plan's name in messages (its test id); ``file`` the file it was read from.
    """

    path: str
    lesson: str
    target: str | None = None
    points: PointsSection | None = None
    scenarios: tuple[ScriptedScenario, ...] = ()
    file: str = ""

    @property
    def name(self) -> str:
        return os.path.splitext(os.path.basename(self.path))[0]
