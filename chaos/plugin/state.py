"""What one pytest process of the plugin keeps between hooks: the resolved settings, the adapters
it loaded, the plans it prepared, the records its items wrote and its scratch folders.

Kept in the config's stash (:func:`plugin_state`), started by ``pytest_configure`` and stopped by
``pytest_unconfigure``, so that a pytest run inside a test (``pytester``) has its own.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any

import pytest

from chaos.plugin.options import Settings, resolve

__all__ = ["PluginState", "plugin_state", "start", "stop"]


class PluginState:
    """What one pytest process keeps: settings, loaded adapters, prepared plans, records."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        self.config = config
        self.settings = settings
        self.records: list[dict[str, Any]] = []
        self._workdir: str | None = None
        self._adapters: dict[str, Any] = {}
        self._prepared: dict[tuple[str, str, int], Any] = {}
        self._scratch_count = 0
        self._points_dir: str | None = None
        self.sent_executable: set[str] = set()
        self.failed_records: list[dict[str, Any]] = []  # the records of failed items and tests
        self.explained: set[str] = set()  # invariants whose "why it matters" a failure printed (see explain)
        # A chaos.plugin.summary.Folded (named, not imported: the summary imports this module).
        self.folded: Any = None  # the plan items the summary stands for, while pytest writes its own
        self.shortened: list[tuple[Any, str, str]] = []  # (a failure's holder, attribute, whole message), while pytest writes its short summary

    def workdir(self) -> str:
        if self._workdir is None:
            from chaos.matrix.work import scratch_dir

            self._workdir = scratch_dir()
        return self._workdir

    def scratch(self, prefix: str) -> str:
        """A new directory; the caller removes it when done (see :meth:`scratch_for`)."""
        self._scratch_count += 1
        path = os.path.join(self.workdir(), f"{prefix}-{self._scratch_count}")
        os.makedirs(path, exist_ok=True)
        return path

    def points_dir(self) -> str:
        """One directory for every crash point this process runs: each run replaces the last."""
        if self._points_dir is None:
            self._points_dir = self.scratch("points")
        return self._points_dir

    def adapter(self, target: str) -> Any:
        if target not in self._adapters:
            from chaos.adapter import load_adapter

            self._adapters[target] = load_adapter(target)
        return self._adapters[target]

    def prepared(self, plan: Any, target: str, faults: tuple[str, ...]) -> Any:
        """A plan's points, prepared once per process (collection and every run reuse them)."""
        key = (plan.file or os.path.abspath(plan.path), target, self.settings.seed)
        if key not in self._prepared:
            from chaos.core import pristine
            from chaos.plans.runner import prepare_target_points

            # Recorded (and later run, see PlanPoint.runtest) in a process that never ran the code
            # under test: the tests run before a plan's points fill no memory its workers start from.
            self._prepared[key] = pristine.call(prepare_target_points, plan, target, self.scratch("plan"), seed=self.settings.seed,
                                                faults=faults, allowed_effects=self.settings.allowed_effects,
                                                timeout_s=self.settings.scenario_timeout_s)
        return self._prepared[key]

    def cleanup(self) -> None:
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None


_STATE = pytest.StashKey[PluginState]()


def plugin_state(config: pytest.Config) -> PluginState:
    return config.stash[_STATE]


def start(config: pytest.Config) -> PluginState:
    """The run's settings resolved (a wrong one stops the run here, before any test) and its state
    kept where every hook and fixture of this config finds it."""
    state = config.stash[_STATE] = PluginState(config, resolve(config))
    return state


def stop(config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is not None:
        if "chaos.core.pristine" in sys.modules:  # a server was started only where a scenario ran
            sys.modules["chaos.core.pristine"].stop()
        state.cleanup()
