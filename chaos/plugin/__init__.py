"""crashgate's pytest plugin: fault plans as tests, crash-matrix fixtures, a summary and a report.

Registered through the ``pytest11`` entry point, so it loads in every pytest run where crashgate is
installed. It imports nothing but pytest and the standard library until it is used (a fault plan
is collected, a crashgate fixture is requested), and prints nothing in a project that does not
use it.

Every option is a command-line flag, an environment variable and an ini key; the command line
wins over the environment, which wins over the ini file:

========================  ==========================  ======================  ========================
flag                      environment                 ini key                 default
========================  ==========================  ======================  ========================
--chaos-target            CRASHGATE_TARGET            chaos_target            chaos:reference_adapter
--chaos-mode              CRASHGATE_MODE              chaos_mode              fork
--chaos-seed              CRASHGATE_SEED              chaos_seed              0
--chaos-points            CRASHGATE_POINTS            chaos_points            all
--chaos-faults            CRASHGATE_FAULTS            chaos_faults            crash
--chaos-pairs             CRASHGATE_PAIRS             chaos_pairs             200
--chaos-report            CRASHGATE_REPORT            chaos_report            (none)
--chaos-baseline          CRASHGATE_BASELINE          chaos_baseline          (none)
--chaos-allow-effects     CRASHGATE_ALLOW_EFFECTS     chaos_allow_effects     (none)
--chaos-all-failures      CRASHGATE_ALL_FAILURES      chaos_all_failures      false
--chaos-scenario-timeout  CRASHGATE_SCENARIO_TIMEOUT  chaos_scenario_timeout  (the adapter's, else 60)
========================  ==========================  ======================  ========================

``--chaos-all-failures`` is a flag without a value; in the environment or the ini file, 1, true,
yes or on sets it.

pytest collects ``fault_plans/*.toml`` as test files (see :mod:`chaos.plans.plan`): one item per crash
point, ``fault_plans/lost_lease.toml::extract::_worker.run_once:L57#1``, two per pause point (the
other worker runs with the frozen one's lease valid, then expired),
``fault_plans/frozen_worker.toml::extract::_worker.run_once:L57#1@pause-live`` and
``...@pause-expired``, one per interleaving pair, ``...::P+Q@interleave``, one per scripted
scenario, ``fault_plans/poison.toml::poison``, and one ``::baseline`` per plan with points (the
iteration run without a crash). A fault of the machine (``disk``, ``io``, ``lock``, ``clock``,
``damage``, or one sub-kind) is one item per sub-kind at every point where it can show,
``fault_plans/disk_full.toml::fetch::_worker.run_once:L57#1@disk-full``. A plan's ``fault`` key
picks its fault kinds; ``--chaos-faults`` does for the plans that have none, and for
``crash_matrix`` tests. Under pytest-xdist each item is
a separate test, and the controller's summary counts them all.

A file of known findings (``--chaos-baseline``) turns a plan item whose every violation is in it
into an xfail, and lets a ``crash_matrix`` test pass on them. Under GitHub Actions
(``GITHUB_ACTIONS=true``) the summary ends with one ``::error`` annotation per finding of each
failing test or plan (:mod:`chaos.core.annotations`).

The package is split by concern, as pytest-xdist keeps its plugin apart from its scheduler and its
workers. In the order a run meets them: :mod:`~chaos.plugin.options` (the settings),
:mod:`~chaos.plugin.state` (what one pytest process keeps), :mod:`~chaos.plugin.collect` and
:mod:`~chaos.plugin.items` (fault plans as tests), :mod:`~chaos.plugin.fixtures`,
:mod:`~chaos.plugin.records` (what every item and test writes in its report) and
:mod:`~chaos.plugin.summary` (the end of the run). This ``__init__`` is what pytest loads: it holds
only the hooks pytest calls first, each importing its module on first use, and
``pytest_configure`` registers the collector, the fixtures and the summary as plugins of their own.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import pytest

__all__ = ["collect", "fixtures", "items", "options", "records", "state", "summary"]

# The names ``chaos.plugin`` offered when it was one module (its options and help texts, which the
# docs and tests import, among them): name -> the module of this package that defines it, imported
# on first use so that ``import chaos.plugin`` alone imports nothing else.
_EXPORTS = {
    "PLAN_DIR": ".collect",
    "MARKER": ".options",
    "REFERENCE_TARGET": ".options",
    "MODES": ".options",
    "FAULTS": ".options",
    "MACHINE_SUBKINDS": ".options",
    "ITEM_KINDS": ".options",
    "PAIRS_DEFAULT": ".options",
    "RECORD_KEY": ".records",
    "ALL_FAILURES_FLAG": ".options",
    "DETAIL_MAX": ".fixtures",
    "FOLD_MIN": ".summary",
    "HELP_GROUP": ".options",
    "HELP_TARGET": ".options",
    "HELP_MODE": ".options",
    "HELP_SEED": ".options",
    "HELP_POINTS": ".options",
    "HELP_FAULTS": ".options",
    "HELP_PAIRS": ".options",
    "HELP_REPORT": ".options",
    "HELP_BASELINE": ".options",
    "HELP_ALLOW_EFFECTS": ".options",
    "HELP_ALL_FAILURES": ".options",
    "HELP_SCENARIO_TIMEOUT": ".options",
    "HELP_MARKER": ".options",
    "Option": ".options",
    "OPTIONS": ".options",
    "Settings": ".options",
    "resolve": ".options",
    "CrashFailure": ".items",
    "PlanFile": ".collect",
    "PlanGroup": ".collect",
    "PlanPoint": ".items",
    "PlanBaseline": ".items",
    "PlanScenario": ".items",
    "explain": ".items",
    "matrix_failure": ".fixtures",
    "junit_properties": ".records",
    "allowed_lines": ".summary",
    "KNOWN_SHOWN_MAX": ".summary",
    "known_lines": ".summary",
    "annotation_lines": ".summary",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'chaos.plugin' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # the next lookup is an ordinary global
    return value


def pytest_addoption(parser: pytest.Parser) -> None:
    """Every option, declared here and not later: pytest parses the command line before it
    configures anything, so an option a plugin registered in ``pytest_configure`` declared would
    be unknown."""
    from chaos.plugin.options import add_options

    add_options(parser)


def pytest_configure(config: pytest.Config) -> None:
    """Resolve the settings, then register the plugins that collect fault plans and offer the
    fixtures, and those that write the summary (pytest reads hooks and fixtures from every
    registered plugin, also one registered now)."""
    from chaos.plugin import collect, fixtures, options, state, summary

    config.addinivalue_line("markers", f"{options.MARKER}{options.HELP_MARKER[len(options.MARKER):]}")
    run = state.start(config)
    config.pluginmanager.register(collect)
    config.pluginmanager.register(fixtures)
    config.pluginmanager.register(summary.Reporter(run), f"crashgate-reporter-{id(config)}")
    config.pluginmanager.register(summary.FoldFailures(run), f"crashgate-fold-{id(config)}")


def pytest_unconfigure(config: pytest.Config) -> None:
    if "chaos.plugin.state" in sys.modules:  # configured: the run's state may exist
        sys.modules["chaos.plugin.state"].stop(config)
