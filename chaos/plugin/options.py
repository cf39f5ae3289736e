"""The plugin's settings: each option as a flag, an environment variable and an ini key (the
table is in :mod:`chaos.plugin`), resolved once per run and checked before any test runs.

A setting that is wrong stops the run with a usage error that names the value, where it came from
and what to use instead. The checks import nothing of the harness unless a setting needs it (a
file of known findings to read, a report path to check).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

import pytest

__all__ = [
    "MARKER",
    "REFERENCE_TARGET",
    "MODES",
    "FAULTS",
    "MACHINE_SUBKINDS",
    "ITEM_KINDS",
    "PAIRS_DEFAULT",
    "ALL_FAILURES_FLAG",
    "HELP_GROUP",
    "HELP_TARGET",
    "HELP_MODE",
    "HELP_SEED",
    "HELP_POINTS",
    "HELP_FAULTS",
    "HELP_PAIRS",
    "HELP_REPORT",
    "HELP_BASELINE",
    "HELP_ALLOW_EFFECTS",
    "HELP_ALL_FAILURES",
    "HELP_SCENARIO_TIMEOUT",
    "HELP_MARKER",
    "Option",
    "OPTIONS",
    "Settings",
    "add_options",
    "resolve",
]

MARKER = "crash_matrix"
REFERENCE_TARGET = "chaos:reference_adapter"  # chaos.adapters.reference.REFERENCE_TARGET, without importing it
MODES = ("fork", "inprocess")  # chaos.core.scenario.MODES (a test checks they agree)
# chaos.matrix.runner.FAULTS: the point faults, then the faults of the machine (a test checks they agree).
FAULTS = ("crash", "pause", "interleave", "disk", "io", "lock", "clock", "damage", "power")
# chaos.hostfaults.faults.KIND_OF: the sub-kinds a fault of the machine names, each allowed alone.
MACHINE_SUBKINDS = ("disk-full", "io-eio", "io-enospc", "lock-held", "clock-back", "clock-forward", "clock-skew",
                    "damage-payload", "damage-state", "damage-memo", "power-full", "power-normal")
ITEM_KINDS = ("crash", "pause-live", "pause-expired", "interleave", *MACHINE_SUBKINDS)  # what follows @ in an item's id
PAIRS_DEFAULT = 200  # chaos.matrix.runner.PAIRS_DEFAULT
ALL_FAILURES_FLAG = "--chaos-all-failures"

HELP_GROUP = "crashgate: crash-test a durable workflow (fault plans, crash matrix)"
HELP_TARGET = (
    "adapter of the engine under test, as MODULE:ATTR (default: chaos:reference_adapter). "
    "Environment: CRASHGATE_TARGET; ini: chaos_target."
)
HELP_MODE = (
    "how a worker dies at a crash point: fork (a real SIGKILL in a forked child; default) or "
    "inprocess (faster and weaker: finally blocks still run). Environment: CRASHGATE_MODE; ini: chaos_mode."
)
HELP_SEED = (
    "seed of every RNG in a scenario (default 0); the same seed replays the same run. "
    "Environment: CRASHGATE_SEED; ini: chaos_seed."
)
HELP_POINTS = (
    "which crash points to run: all (default), N (a seeded sample of N per plan and per matrix, one of each fault kind first), or one "
    "point as [GROUP::]POINT[@KIND], e.g. extract::_worker.run_once:L57#1@pause-live. Environment: CRASHGATE_POINTS; ini: chaos_points."
)
HELP_FAULTS = (
    "what happens at each point, a comma list of: crash (kill the worker; default), pause (freeze it while "
    "another worker runs, its lease valid, then expired), interleave (two workers frozen in turn at pairs of "
    "points), and the faults of the machine: disk, io, lock, clock, damage, power, or one sub-kind (e.g. disk-full). "
    "For plans without a fault key, and crash_matrix tests. Environment: CRASHGATE_FAULTS; ini: chaos_faults."
)
HELP_PAIRS = (
    "at most this many interleaving pairs per plan and per crash_matrix test, a seeded sample when more exist, "
    "each first point its share (default 200). Environment: CRASHGATE_PAIRS; ini: chaos_pairs."
)
HELP_REPORT = (
    "write the HTML crash report (the traced source, each line coloured by outcome) to this path. "
    "Environment: CRASHGATE_REPORT; ini: chaos_report (relative to the ini file's directory)."
)
HELP_BASELINE = (
    "a file of known findings (written by python -m chaos baseline): crash_matrix tests fail only on findings "
    "not in it; a fault-plan item whose every violation is in it is reported as xfail (known finding); the "
    "summary names the known ones no longer seen. Environment: CRASHGATE_BASELINE; ini: chaos_baseline "
    "(relative to the ini file's directory)."
)
HELP_ALLOW_EFFECTS = (
    "what the steps do that is no effect on the world, a comma list of KIND:PATTERN: file:GLOB (a cache folder), "
    "connect:HOST:PORT (a service a step only reads from; globs allowed), http:HOST:PORT (one it may POST, PUT, PATCH "
    "or DELETE to), mail:HOST:PORT (an SMTP server it may send to), subprocess:GLOB (a program). Every other file a "
    "step writes outside the run's folder, connection it opens, mail it sends and process it starts fails "
    "effects-through-outbox; each entry is shown in the summary. Environment: CRASHGATE_ALLOW_EFFECTS; ini: chaos_allow_effects."
)
HELP_ALL_FAILURES = (
    "list every violated point: in pytest's failures and short summary, in a crash_matrix test's failure and in the "
    "crashgate summary. By default each finding is shown once (count, fix, replay command), and the fault-plan items "
    "that fail alike for a finding shown are left out of pytest's failures and short summary, yet counted and kept "
    "in the JUnit XML and the HTML report. Environment: CRASHGATE_ALL_FAILURES=1; ini: chaos_all_failures = true."
)
HELP_SCENARIO_TIMEOUT = (
    "seconds one scenario (a point's kill or freeze and its recovery, a family's setup and baseline) may run before it is a "
    "hangs finding: every thread's stack of its processes is taken, they are killed and the run goes on (default: the "
    "adapter's scenario_timeout_s, else 60; a family's points get at least ten times its baseline's time). "
    "Environment: CRASHGATE_SCENARIO_TIMEOUT; ini: chaos_scenario_timeout."
)
HELP_MARKER = (
    "crash_matrix(target=None, families=None): a crash-matrix test. Its keyword arguments are the "
    "defaults of the crash_matrix and chaos_world fixtures; select or skip such tests with -m crash_matrix."
)


@dataclass(frozen=True)
class Option:
    """One setting: its command-line flag, environment variable, ini key, default and help."""

    key: str
    flag: str
    env: str
    ini: str
    default: str
    help: str
    boolean: bool = False  # a flag without a value: on the command line it sets "true"


OPTIONS = (
    Option("target", "--chaos-target", "CRASHGATE_TARGET", "chaos_target", REFERENCE_TARGET, HELP_TARGET),
    Option("mode", "--chaos-mode", "CRASHGATE_MODE", "chaos_mode", "fork", HELP_MODE),
    Option("seed", "--chaos-seed", "CRASHGATE_SEED", "chaos_seed", "0", HELP_SEED),
    Option("points", "--chaos-points", "CRASHGATE_POINTS", "chaos_points", "all", HELP_POINTS),
    Option("faults", "--chaos-faults", "CRASHGATE_FAULTS", "chaos_faults", "crash", HELP_FAULTS),
    Option("pairs", "--chaos-pairs", "CRASHGATE_PAIRS", "chaos_pairs", str(PAIRS_DEFAULT), HELP_PAIRS),
    Option("report", "--chaos-report", "CRASHGATE_REPORT", "chaos_report", "", HELP_REPORT),
    Option("baseline", "--chaos-baseline", "CRASHGATE_BASELINE", "chaos_baseline", "", HELP_BASELINE),
    Option("allow_effects", "--chaos-allow-effects", "CRASHGATE_ALLOW_EFFECTS", "chaos_allow_effects", "", HELP_ALLOW_EFFECTS),
    Option("all_failures", "--chaos-all-failures", "CRASHGATE_ALL_FAILURES", "chaos_all_failures", "false", HELP_ALL_FAILURES,
           boolean=True),
    Option("scenario_timeout", "--chaos-scenario-timeout", "CRASHGATE_SCENARIO_TIMEOUT", "chaos_scenario_timeout", "",
           HELP_SCENARIO_TIMEOUT),
)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
_POINT_FORM = re.compile(rf"^(?:[^:\s]+::)?[^@\s]+:L\d+#\d+(?:@(?:{'|'.join(ITEM_KINDS)}))?$")
_TARGET_FORM = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


@dataclass(frozen=True)
class Settings:
    """The resolved settings, and where each came from (for error messages and the summary)."""

    target: str
    mode: str
    seed: int
    points: str
    report: str | None
    sources: dict[str, str]
    faults: tuple[str, ...] = ("crash",)
    pairs: int = PAIRS_DEFAULT
    known: frozenset = frozenset()  # (family, fault, invariant, cause) of the file of known findings
    known_file: str = ""
    allowed_effects: tuple[str, ...] = ()  # KIND:PATTERN entries of what is no effect (chaos.core.effects)
    all_failures: bool = False  # list every violated point, not each finding once
    scenario_timeout_s: float | None = None  # the bound on one scenario (None: the adapter's, else the default)


def add_options(parser: pytest.Parser) -> None:
    """Declare every option as a flag and an ini key (called by ``pytest_addoption``)."""
    group = parser.getgroup("crashgate", HELP_GROUP)
    for option in OPTIONS:
        if option.boolean:
            group.addoption(option.flag, dest=f"chaos_{option.key}", action="store_const", const="true", default=None, help=option.help)
        else:
            group.addoption(option.flag, dest=f"chaos_{option.key}", default=None, metavar=option.key.upper(), help=option.help)
        parser.addini(option.ini, help=option.help, default=None)


def resolve(config: pytest.Config) -> Settings:
    """Command line, then environment variable, then ini key, then the default."""
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    for option in OPTIONS:
        cli = config.getoption(f"chaos_{option.key}", default=None)
        env = os.environ.get(option.env)
        ini = config.getini(option.ini)
        if cli is not None:
            values[option.key], sources[option.key] = str(cli), f"command line {option.flag}"
        elif env is not None and env != "":
            values[option.key], sources[option.key] = env, f"environment variable {option.env}"
        elif ini not in (None, ""):
            values[option.key], sources[option.key] = str(ini).strip(), f"ini key {option.ini}"
        else:
            values[option.key], sources[option.key] = option.default, "default"
    return Settings(
        target=_check_target(values["target"], sources["target"]),
        mode=_check_choice("mode", values["mode"], sources["mode"], MODES),
        seed=_check_seed(values["seed"], sources["seed"]),
        points=_check_points(values["points"], sources["points"]),
        report=_checked_report_path(config, values["report"], sources["report"]),
        sources=sources,
        faults=_check_faults(values["faults"], sources["faults"]),
        pairs=_check_pairs(values["pairs"], sources["pairs"]),
        **_known_findings(config, values["baseline"], sources["baseline"]),
        allowed_effects=_check_allowed_effects(values["allow_effects"], sources["allow_effects"]),
        all_failures=_check_boolean("all_failures", values["all_failures"], sources["all_failures"]),
        scenario_timeout_s=_check_scenario_timeout(values["scenario_timeout"], sources["scenario_timeout"]),
    )


def _check_scenario_timeout(value: str, source: str) -> float | None:
    if not value.strip():
        return None  # the adapter's, else the default: the plugin imports nothing of the harness for it
    from chaos.core.hangs import check_timeout

    try:
        return check_timeout(value.strip(), source)
    except ValueError as exc:
        raise pytest.UsageError(f"crashgate {exc}") from None


def _check_allowed_effects(value: str, source: str) -> tuple[str, ...]:
    if not value.strip():
        return ()  # nothing declared: the plugin imports nothing of the harness for it
    from chaos.core.effects import parse_allowed

    try:
        return tuple(str(entry) for entry in parse_allowed(value.split(",")))
    except ValueError as exc:
        raise pytest.UsageError(f"crashgate allow_effects {value!r} (from {source}): {exc}") from None


def _known_findings(config: pytest.Config, value: str, source: str) -> dict[str, Any]:
    """The file of known findings, read once: a bad file is a usage error naming it and its source."""
    if not value:
        return {}
    from chaos.core.findings import read_known

    path = _report_path(config, value, source) or value  # relative to the ini file, as --chaos-report is
    try:
        return {"known": frozenset(read_known(path)), "known_file": path}
    except ValueError as exc:
        raise pytest.UsageError(f"crashgate baseline (from {source}): {exc}") from None


def _check_target(value: str, source: str) -> str:
    if not _TARGET_FORM.match(value):
        raise pytest.UsageError(f"crashgate target {value!r} (from {source}) must look like MODULE:ATTR, e.g. {REFERENCE_TARGET}")
    return value


def _check_choice(key: str, value: str, source: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise pytest.UsageError(f"crashgate {key} {value!r} (from {source}) is not allowed; choose one of: {', '.join(allowed)}")
    return value


def _check_boolean(key: str, value: str, source: str) -> bool:
    word = value.strip().lower()
    if word in _TRUE or word in _FALSE:
        return word in _TRUE
    raise pytest.UsageError(f"crashgate {key.replace('_', '-')} {value!r} (from {source}) is not allowed; use one of: "
                            f"{', '.join(_TRUE)} to set it, or {', '.join(_FALSE)}")


def _check_seed(value: str, source: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise pytest.UsageError(f"crashgate seed {value!r} (from {source}) must be an integer, e.g. 0") from None


def _check_points(value: str, source: str) -> str:
    value = value.strip()
    if value == "all" or (value.isdigit() and int(value) > 0) or _POINT_FORM.match(value):
        return value
    raise pytest.UsageError(
        f"crashgate points {value!r} (from {source}) is not allowed; use all, a sample size N > 0, "
        "or one point as [GROUP::]POINT[@KIND], e.g. extract::_worker.run_once:L57#1"
    )


def _check_faults(value: str, source: str) -> tuple[str, ...]:
    kinds = tuple(dict.fromkeys(k.strip() for k in value.split(",") if k.strip()))
    unknown = [k for k in kinds if k not in FAULTS and k not in MACHINE_SUBKINDS]
    if unknown or not kinds:
        what = f"has unknown kind {unknown[0]!r}" if unknown else "names no fault kind"
        raise pytest.UsageError(
            f"crashgate faults {value!r} (from {source}) {what}; use a comma list of: {', '.join(FAULTS)} "
            f"(or a sub-kind: {', '.join(MACHINE_SUBKINDS)}), e.g. crash,pause"
        )
    return kinds


def _check_pairs(value: str, source: str) -> int:
    value = value.strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    raise pytest.UsageError(f"crashgate pairs {value!r} (from {source}) must be an integer > 0, e.g. {PAIRS_DEFAULT}")


def _report_path(config: pytest.Config, value: str, source: str) -> str | None:
    if not value:
        return None
    if source.startswith("ini"):
        base = config.inipath.parent if config.inipath else config.rootpath
    else:
        base = config.invocation_params.dir
    return os.path.join(str(base), os.path.expanduser(value))


def _checked_report_path(config: pytest.Config, value: str, source: str) -> str | None:
    """The report's path, refused before any test if the run could not write it there at the end."""
    path = _report_path(config, value, source)
    if path is not None:
        from chaos.report.html import check_report_path

        try:
            check_report_path(path)
        except ValueError as exc:
            raise pytest.UsageError(f"crashgate report (from {source}): {exc}") from None
    return path
