"""Fault plans: small TOML files that say what to break and what must still hold.

pytest collects every ``fault_plans/*.toml`` (through the crashgate plugin) as a test file. A plan
states, in one sentence, the lesson it teaches, then has a ``[points]`` section (kill a worker at
every crash point of one iteration: one test item per point), ``[[scenario]]`` tables (a scripted
sequence of actions and checks: one test item each), or both::

    lesson = "A poison input is paid for once and parked, never retried."

    [points]                       # one item per crash point: PLAN::GROUP::POINT
    faults = [{ kind = "bad_request", task = "extract", sticky = true }]
    steps = ["extract"]            # only the points while the job is in step 'extract'
    expect = { state = "failed_extract", calls = { extract = 1 } }

    [[scenario]]                   # one item: PLAN::NAME
    name = "poison"
    script = [
      { fault = "bad_request", task = "extract", sticky = true },
      { drain = true },
    ]
    expect = { state = "failed_extract", calls = { extract = 1 } }

A ``[points]`` section's ``fault`` says what happens at each point: ``crash``, ``pause``,
``interleave``, a fault of the machine (``disk``, ``io``, ``lock``, ``clock``, ``damage``, or one
sub-kind such as ``disk-full``; see :mod:`chaos.hostfaults.faults`), or a list of them.

Every key is checked when the plan is collected: an unknown key, a value of the wrong type, or
an unknown step, state, fault or action is a collection error naming the file, the key and the
values allowed. The full schema is in README.md ("Fault plans"). This module reads a plan; its
vocabulary is :mod:`chaos.plans.schema`, the parsed plan :mod:`chaos.plans.model`, the checks
against a target :mod:`chaos.plans.target_check` (this module's ``__all__`` names their public
names too, so that a plan is used from one import).

>>> plan = parse_plan({"lesson": "Memo rows make a crash cost one call.", "points": {}}, "demo.toml")
>>> plan.points.phase, plan.points.jobs  # the target's first job, named when it runs (chaos.adapter.resolve_jobs)
('worker', ('<job 1>',))
"""

from __future__ import annotations

import json
import math
import os
import stat
import tomllib
from typing import Any, Mapping

from chaos.plans.model import Action, Expect, FaultSpec, Plan, PlanError, PointsSection, ScriptedScenario
from chaos.plans.schema import (ACTIONS, BURST_KEYS, EXPECTED_ERRORS, EXPECT_KEYS, FAULT_KEYS, GAP_KEYS, GROUP_CLAIM,
                                GROUP_RELEASE, GROUP_SEND, JOBS_MAX, NAME_FORM, PER_JOB_MAX, PHASES, PLAN_BYTES_MAX, PLAN_KEYS,
                                POINTS_KEYS, POINT_FAULTS, POLL_TICKS_MAX, RESOLUTIONS, RETRY_AFTER_S_MAX, RUN_MAX, SCENARIO_KEYS,
                                SCENARIO_ONLY_EXPECT, SECONDS_MAX, SETUP_FORM, SLOW_CALL_S_MAX)
from chaos.plans.target_check import check_against, check_jobs_named, clipped

__all__ = [
    "Plan",
    "PlanError",
    "PointsSection",
    "ScriptedScenario",
    "Action",
    "Expect",
    "load_plan",
    "machine_fault_names",
    "parse_plan",
    "PLAN_KEYS",
    "POINTS_KEYS",
    "SCENARIO_KEYS",
    "EXPECT_KEYS",
    "ACTIONS",
    "GROUP_CLAIM",
    "GROUP_RELEASE",
    "GROUP_SEND",
    "FaultSpec",
    "check_against",
]


def load_plan(path: str | os.PathLike[str], *, shown: str | None = None) -> Plan:
    """Read and check a plan file; a :class:`PlanError` names the file (as ``shown``, if given),
    the key and the fix."""
    path = os.fspath(path)
    name = shown or path
    try:
        info = os.stat(path)  # follows a link; a FIFO or a device would block or never end when read
        if not stat.S_ISREG(info.st_mode):
            raise PlanError(f"{name}: not a regular file; pass the path of a .toml file")
        if info.st_size > PLAN_BYTES_MAX:
            raise PlanError(f"{name}: {info.st_size:,} bytes, more than a fault plan's {PLAN_BYTES_MAX:,}; pass the path of a .toml plan")
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"{name}: not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise PlanError(f"{name}: not UTF-8 text (byte {exc.start}: {exc.reason}); save the plan as UTF-8, as TOML requires") from None
    except RecursionError:
        raise PlanError(f"{name}: nested too deeply for the TOML parser; a fault plan needs a few levels of tables") from None
    except OSError as exc:
        raise PlanError(f"{name}: cannot be read ({exc.strerror or exc}); pass the path of a .toml file") from None
    plan = parse_plan(data, shown or path)
    return Plan(plan.path, plan.lesson, plan.target, plan.points, plan.scenarios, file=os.path.abspath(path))


def parse_plan(data: Mapping[str, Any], path: str) -> Plan:
    """Check a plan's TOML data and build its :class:`Plan`."""
    _known(path, "", data, PLAN_KEYS)
    if "lesson" not in data:
        raise PlanError(f"{path}: missing key 'lesson': say in one sentence what this plan teaches")
    lesson = _text(path, "lesson", data["lesson"])
    target = _text(path, "target", data["target"]) if "target" in data else None
    if target is not None and ":" not in target:
        raise PlanError(f"{path}: key 'target' must look like MODULE:ATTR, got {target!r}")
    if target is not None and target.startswith("."):
        raise PlanError(f"{path}: key 'target' is {target!r}, a relative module; name it from the top, e.g. mypackage.adapters:adapter")
    points = _points(path, _table(path, "points", data["points"])) if "points" in data else None
    raw_scenarios = data.get("scenario", [])
    if not isinstance(raw_scenarios, list):
        raise PlanError(f"{path}: key 'scenario' must be an array of tables ([[scenario]]), got {_kind(raw_scenarios)}")
    scenarios = tuple(_scenario(path, i, _table(path, f"scenario[{i}]", raw), lesson) for i, raw in enumerate(raw_scenarios))
    names = [s.name for s in scenarios]
    for name in names:
        if names.count(name) > 1:
            raise PlanError(f"{path}: two scenarios are named {name!r}; every [[scenario]] needs its own name")
    if points is None and not scenarios:
        raise PlanError(f"{path}: the plan has nothing to run; add a [points] table or a [[scenario]]")
    return Plan(path, lesson, target, points, scenarios)


def _points(path: str, raw: Mapping[str, Any]) -> PointsSection:
    where = "points"
    _known(path, where, raw, POINTS_KEYS)
    phase = _choice(path, f"{where}.phase", raw.get("phase", "worker"), PHASES)
    setup = tuple(_texts(path, f"{where}.setup", raw.get("setup", [])))
    for action in setup:
        if not SETUP_FORM.match(action):
            raise PlanError(f"{path}: key '{where}.setup' has {action!r}; allowed: run, send, advance:<seconds>, claim[:<worker>]")
    steps = raw.get("steps")
    jobs = _jobs(path, f"{where}.jobs", raw.get("jobs", 1))
    expect = _expect(path, f"{where}.expect", raw["expect"], scenario=False) if "expect" in raw else None
    check_jobs_named(path, expect, list(jobs))
    return PointsSection(
        jobs=jobs,
        setup=setup,
        phase=phase,
        faults=tuple(_fault(path, f"{where}.faults[{i}]", f) for i, f in enumerate(_list(path, f"{where}.faults", raw.get("faults", [])))),
        second_worker=_bool(path, f"{where}.second_worker", raw.get("second_worker", False)),
        steps=None if steps is None else tuple(_texts(path, f"{where}.steps", steps)),
        deep=_bool(path, f"{where}.deep", raw.get("deep", True)),
        fault=_point_faults(path, f"{where}.fault", raw["fault"]) if "fault" in raw else None,
        expect=expect,
    )


def machine_fault_names() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The faults of the machine a plan may name: the kinds, and every kind's sub-kinds.

    >>> kinds, subs = machine_fault_names()
    >>> kinds
    ('disk', 'io', 'lock', 'clock', 'damage', 'power')
    >>> subs[:2]
    ('disk-full', 'io-eio')
    """
    from chaos.hostfaults.faults import KIND_OF, MACHINE_FAULTS  # imported when a plan is read, not before

    return tuple(MACHINE_FAULTS), tuple(KIND_OF)


def _point_faults(path: str, key: str, value: Any) -> tuple[str, ...]:
    """``fault = "pause"`` or ``fault = ["crash", "disk"]``: the kinds, each once, in order."""
    kinds, subs = machine_fault_names()
    allowed = POINT_FAULTS + kinds
    described = f"{', '.join(allowed)} (or a sub-kind: {', '.join(subs)})"
    if isinstance(value, str):
        return (_fault_name(path, key, value, allowed + subs, described),)
    if not isinstance(value, list):
        raise PlanError(f"{path}: key '{key}' must be one of {', '.join(allowed)} or an array of them, got {_kind(value)}")
    names = [_fault_name(path, f"{key}[{i}]", v, allowed + subs, described) for i, v in enumerate(value)]
    if not names:
        raise PlanError(f"{path}: key '{key}' is an empty array; name at least one of: {', '.join(allowed)}")
    return tuple(dict.fromkeys(names))


def _fault_name(path: str, key: str, value: Any, allowed: tuple[str, ...], described: str) -> str:
    if value not in allowed:
        raise PlanError(f"{path}: key '{key}' is {value!r}; allowed: {described}")
    return value


def _scenario(path: str, index: int, raw: Mapping[str, Any], plan_lesson: str) -> ScriptedScenario:
    where = f"scenario[{index}]"
    _known(path, where, raw, SCENARIO_KEYS)
    if "name" not in raw:
        raise PlanError(f"{path}: [[scenario]] number {index + 1} has no 'name'; it names the test item")
    name = _text(path, f"{where}.name", raw["name"])
    if not NAME_FORM.match(name):
        raise PlanError(f"{path}: key '{where}.name' is {clipped(name)}; use at most 63 letters, digits, _ . - (it is part of a test id)")
    where = f"scenario {name!r}"
    if "script" not in raw:
        raise PlanError(f"{path}: {where} has no 'script'; list its actions, e.g. script = [{{ drain = true }}]")
    script = tuple(_action(path, f"{where} script[{i}]", a) for i, a in enumerate(_list(path, f"{where}.script", raw["script"])))
    jobs = _jobs(path, f"{where}.jobs", raw.get("jobs", 1))
    expect = _expect(path, f"{where}.expect", raw["expect"], scenario=True) if "expect" in raw else None
    submitted = [*jobs, *(a.value for a in script if a.verb == "submit")]
    for checked in [expect, *(a.expect for a in script)]:
        check_jobs_named(path, checked, submitted)
    return ScriptedScenario(
        name=name,
        lesson=_text(path, f"{where}.lesson", raw["lesson"]) if "lesson" in raw else plan_lesson,
        jobs=jobs,
        script=script,
        expect=expect,
    )


def _action(path: str, where: str, raw: Any) -> Action:
    table = _table(path, where, raw)
    verbs = [k for k in table if k in ACTIONS]
    if len(verbs) != 1:
        found = f"found {verbs}" if verbs else f"found only {sorted(table)}"
        raise PlanError(f"{path}: {where} needs exactly one action key ({found}); allowed actions: {', '.join(ACTIONS)}")
    verb = verbs[0]
    allowed = ACTIONS[verb][1]
    for key in table:
        if key != verb and key not in allowed:
            options = ", ".join(allowed) if allowed else "nothing else"
            raise PlanError(f"{path}: {where}: unknown key {key!r} for action {verb!r}; allowed with {verb!r}: {options}")
    value = table[verb]
    options: dict[str, Any] = {}
    if "worker" in table:
        options["worker"] = _text(path, f"{where}.worker", table["worker"])
    if "expect_error" in table:
        options["expect_error"] = _choice(path, f"{where}.expect_error", table["expect_error"], EXPECTED_ERRORS)
    fault = expect = None
    if verb in ("submit", "requeue", "resolve", "cancel"):
        value = _text(path, f"{where}.{verb}", value)
        if verb == "submit" and "payload" in table:
            options["payload"] = _payload(path, f"{where}.payload", table["payload"])
        if verb == "resolve":
            if "action" not in table:
                raise PlanError(f"{path}: {where}: resolve needs 'action'; allowed: {', '.join(RESOLUTIONS)}")
            options["action"] = _choice(path, f"{where}.action", table["action"], RESOLUTIONS)
    elif verb == "run":
        value = _int(path, f"{where}.run", value, minimum=1, maximum=RUN_MAX)
    elif verb in ("send", "drain", "heal"):
        if value is not True:
            raise PlanError(f"{path}: {where}: key {verb!r} must be true, got {value!r}")
    elif verb == "advance_s":
        value = _number(path, f"{where}.advance_s", value, minimum=0.0)
    elif verb == "poll_s":
        value = _number(path, f"{where}.poll_s", value, minimum=0.0)
        options["tick_s"] = _number(path, f"{where}.tick_s", table.get("tick_s", 0.25), minimum=0.001)
        if value / options["tick_s"] > POLL_TICKS_MAX:
            raise PlanError(
                f"{path}: key '{where}.poll_s' is {value:g}s every {options['tick_s']:g}s, more than {POLL_TICKS_MAX} ticks; "
                f"allowed: at most {POLL_TICKS_MAX} ticks: shorten poll_s or raise tick_s"
            )
    elif verb == "fault":
        fault = _fault(path, where, {"kind": value, **{k: v for k, v in table.items() if k != "fault"}})
    elif verb == "expect":
        expect = _expect(path, f"{where}.expect", value, scenario=True)
    return Action(where, verb, value, options, fault, expect)


def _payload(path: str, key: str, value: Any) -> Any:
    """A submit's payload: what JSON holds (TOML has dates and times, and nan and inf, which it does not)."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PlanError(f"{path}: key '{key}' is not JSON ({exc}); a payload holds strings, numbers, booleans, arrays and "
                        "tables: write a date or a time as a string, e.g. \"1979-05-27T07:32:00Z\"") from None
    return value


def _fault(path: str, where: str, raw: Any) -> FaultSpec:
    from chaos.core.call_faults import FAULT_KINDS  # a light module: the fault names are its data

    table = _table(path, where, raw)
    _known(path, where, table, FAULT_KEYS)
    if "kind" not in table:
        raise PlanError(f"{path}: {where} has no 'kind'; allowed kinds: {', '.join(FAULT_KINDS)}")
    return FaultSpec(
        kind=_choice(path, f"{where}.kind", table["kind"], FAULT_KINDS),
        task=_text(path, f"{where}.task", table["task"]) if "task" in table else None,
        sticky=_bool(path, f"{where}.sticky", table.get("sticky", False)),
        retry_after_s=_number(path, f"{where}.retry_after_s", table["retry_after_s"], minimum=0.0, maximum=RETRY_AFTER_S_MAX)
        if "retry_after_s" in table else None,
        duration_s=_number(path, f"{where}.duration_s", table["duration_s"], minimum=0.0, maximum=SLOW_CALL_S_MAX)
        if "duration_s" in table else None,
        per_job=_per_job(path, where, table),
    )


def _per_job(path: str, where: str, table: Mapping[str, Any]) -> int:
    if "per_job" not in table:
        return 0
    per_job = _int(path, f"{where}.per_job", table["per_job"], minimum=1, maximum=PER_JOB_MAX)
    if not table.get("sticky", False):
        raise PlanError(f"{path}: key '{where}.per_job' needs sticky = true (it hits each job's first {per_job} calls); "
                        "add sticky = true")
    return per_job


def _expect(path: str, where: str, raw: Any, *, scenario: bool) -> Expect:
    table = _table(path, where, raw)
    _known(path, where, table, EXPECT_KEYS)
    if not scenario:
        for key in SCENARIO_ONLY_EXPECT:
            if key in table:
                raise PlanError(f"{path}: key '{where}.{key}' is allowed only in a [[scenario]]'s expect")
    states = _table(path, f"{where}.states", table.get("states", {}))
    calls = _table(path, f"{where}.calls", table.get("calls", {}))
    burst = gap = None
    if "burst_max" in table:
        burst = dict(_table(path, f"{where}.burst_max", table["burst_max"]))
        _known(path, f"{where}.burst_max", burst, BURST_KEYS)
        _require(path, f"{where}.burst_max", burst, ("step", "max"))
        _text(path, f"{where}.burst_max.step", burst["step"])
        _int(path, f"{where}.burst_max.max", burst["max"], minimum=0)
        burst["window_s"] = _number(path, f"{where}.burst_max.window_s", burst.get("window_s", 1.0), minimum=0.001)
        burst["from_s"] = _number(path, f"{where}.burst_max.from_s", burst.get("from_s", 0.0), minimum=0.0)
    if "call_gap_min" in table:
        gap = dict(_table(path, f"{where}.call_gap_min", table["call_gap_min"]))
        _known(path, f"{where}.call_gap_min", gap, GAP_KEYS)
        _require(path, f"{where}.call_gap_min", gap, ("step", "seconds"))
        _text(path, f"{where}.call_gap_min.step", gap["step"])
        gap["seconds"] = _number(path, f"{where}.call_gap_min.seconds", gap["seconds"], minimum=0.0)
    return Expect(
        where=where,
        state=_text(path, f"{where}.state", table["state"]) if "state" in table else None,
        states={k: _text(path, f"{where}.states.{k}", v) for k, v in states.items()},
        calls={k: _int(path, f"{where}.calls.{k}", v, minimum=0) for k, v in calls.items()},
        applied=_int(path, f"{where}.applied", table["applied"], minimum=0) if "applied" in table else None,
        wasted_max=_int(path, f"{where}.wasted_max", table["wasted_max"], minimum=0) if "wasted_max" in table else None,
        job_rows=_int(path, f"{where}.job_rows", table["job_rows"], minimum=0) if "job_rows" in table else None,
        burst_max=burst,
        call_gap_min=gap,
    )


# -- small typed readers ------------------------------------------------------------------------
def _known(path: str, where: str, table: Mapping[str, Any], allowed: Mapping[str, str]) -> None:
    for key in table:
        if key not in allowed:
            place = f" in [{where}]" if where else ""
            raise PlanError(f"{path}: unknown key {key!r}{place}; allowed keys: {', '.join(allowed)}")


def _require(path: str, where: str, table: Mapping[str, Any], keys: tuple[str, ...]) -> None:
    for key in keys:
        if key not in table:
            raise PlanError(f"{path}: key '{where}' needs {key!r} (it takes: {', '.join(keys)})")


def _kind(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "an array", dict: "a table"}
    return f"{names.get(type(value), type(value).__name__)} ({value!r})"


def _table(path: str, key: str, value: Any) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise PlanError(f"{path}: key '{key}' must be a table, got {_kind(value)}")
    return value


def _list(path: str, key: str, value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise PlanError(f"{path}: key '{key}' must be an array, got {_kind(value)}")
    return value


def _text(path: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise PlanError(f"{path}: key '{key}' must be a non-empty string, got {_kind(value)}")
    return value


def _texts(path: str, key: str, value: Any) -> list[str]:
    return [_text(path, f"{key}[{i}]", v) for i, v in enumerate(_list(path, key, value))]


def _bool(path: str, key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise PlanError(f"{path}: key '{key}' must be true or false, got {_kind(value)}")
    return value


def _int(path: str, key: str, value: Any, *, minimum: int, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise PlanError(f"{path}: key '{key}' must be an integer >= {minimum}, got {_kind(value)}")
    if maximum is not None and value > maximum:
        raise PlanError(f"{path}: key '{key}' is {value}; allowed: at most {maximum}")
    return value


def _number(path: str, key: str, value: Any, *, minimum: float, maximum: float = SECONDS_MAX) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= minimum:
        raise PlanError(f"{path}: key '{key}' must be a finite number >= {minimum:g}, got {_describe_number(value)}")
    if (isinstance(value, float) and not math.isfinite(value)) or value > maximum:
        raise PlanError(f"{path}: key '{key}' is {_show(value)}; allowed: a finite number, at most {maximum:g}")
    return float(value)


def _describe_number(value: Any) -> str:
    return _kind(value) if not isinstance(value, (int, float)) or isinstance(value, bool) else _show(value)


def _show(value: int | float) -> str:
    """A number as a message shows it: floats as %g (nan, inf, 1e+308), huge integers clipped."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return text if len(text) <= 24 else text[:21] + "..."


def _choice(path: str, key: str, value: Any, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise PlanError(f"{path}: key '{key}' is {value!r}; allowed: {', '.join(allowed)}")
    return value


def _jobs(path: str, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        if not 1 <= value <= JOBS_MAX:
            raise PlanError(f"{path}: key '{key}' must be between 1 and {JOBS_MAX}, got {value}")
        # The target's first N jobs: their ids are the adapter's job_ids, known once the plan has a target.
        return tuple(f"<job {i}>" for i in range(1, value + 1))
    ids = _texts(path, key, value)
    if len(set(ids)) != len(ids):
        raise PlanError(f"{path}: key '{key}' lists a job id twice; ids are idempotency keys, each is one job")
    return tuple(ids)
