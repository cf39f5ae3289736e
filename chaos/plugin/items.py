"""A fault plan's test items: its baseline (``PLAN::baseline``), one per point and fault
(``PLAN::GROUP::POINT[@KIND]``) and one per scripted scenario (``PLAN::NAME``).

Each runs its part of the plan in a process that never ran the code under test
(:mod:`chaos.core.pristine`), writes a record (:mod:`chaos.plugin.records`) and fails, explained
(:func:`explain`), when an invariant or an expectation of the plan broke; an item whose every
violation is a known finding is an xfail.
"""

from __future__ import annotations

import os
import shlex
import shutil
from typing import Any

import pytest

from chaos.plugin.options import MACHINE_SUBKINDS, MARKER, PAIRS_DEFAULT, REFERENCE_TARGET
from chaos.plugin.records import RECORD_KEY, all_known, junit_properties
from chaos.plugin.state import plugin_state

__all__ = ["CrashFailure", "PlanBaseline", "PlanItem", "PlanPoint", "PlanScenario", "explain"]


class CrashFailure(Exception):
    """A crash point or scenario that broke an invariant or an expectation; its text explains."""


class PlanItem(pytest.Item):
    """What every fault-plan item shares: the plan, its marker, its failure text, its record."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_marker(MARKER)
        # The plan file is the nearest file above the item (a point's group is a collector, not a file).
        # A chaos.plugin.collect.PlanFile (named, not imported: the collector imports this module).
        self.plan_file: Any = self.getparent(pytest.File)

    @property
    def plan(self) -> Any:
        return self.plan_file.plan

    def replay(self) -> str:
        s = plugin_state(self.config).settings
        parts = ["python", "-m", "pytest", self.nodeid, "--chaos-mode", s.mode, "--chaos-seed", str(s.seed)]
        if self.plan.target is None and s.target != REFERENCE_TARGET:
            parts += ["--chaos-target", s.target]
        parts += self._replay_settings()
        return " ".join(shlex.quote(p) for p in parts)

    def _replay_settings(self) -> list[str]:
        """The settings that decide whether this item exists at all (see :class:`PlanPoint`)."""
        return []

    def record(self, **fields: Any) -> dict[str, Any]:
        s = plugin_state(self.config).settings
        rec = {
            "nodeid": self.nodeid,
            "plan": self.plan_file.nodeid,
            "family": self.plan.name,  # the scenario family of the plan's points: what a known finding names
            "lesson": self.plan.lesson,
            "target": self.plan_file.target,
            "mode": s.mode,
            "seed": s.seed,
            "replay": self.replay(),
            **fields,
        }
        self.user_properties.append((RECORD_KEY, rec))
        self.user_properties.extend(junit_properties([rec]))
        return rec

    def verdict(self, rec: dict[str, Any]) -> None:
        """Fail the item, explained, unless it held; an item whose every violation is a known
        finding (``--chaos-baseline``), and no expectation of the plan failed, is an xfail."""
        if rec["held"]:
            return
        s = plugin_state(self.config).settings
        if rec["violations"] and not rec["failures"] and all_known(rec, s.known):
            from chaos.core.annotations import shown_path

            invariants = ", ".join(sorted({invariant for invariant, _ in rec["violations"]}))
            pytest.xfail(f"known finding (in {shown_path(s.known_file)}): {invariants}")
        raise CrashFailure(explain(rec, plugin_state(self.config).explained))

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, CrashFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)


class PlanPoint(PlanItem):
    """``PLAN::GROUP::POINT``: kill the worker at one point, recover, check every invariant.

    With ``fault`` a pause kind (``POINT@pause-live``, ``POINT@pause-expired``), freeze it there
    while another worker runs, then resume it; with ``interleave`` (``P+Q@interleave``), freeze it
    at P while a second worker runs to Q and freezes, then resume both in turn; with a fault of the
    machine (``POINT@disk-full``, ``@lock-held``, ...), inject it there, let the worker run on with
    it, remove it, and require the same worker to drain.
    """

    EXPECTED_EXITS = {"crash": ("killed",), "pause-live": ("paused",), "pause-expired": ("paused",),
                      # B never reaching Q is still an interleaving (B ran to its end while A was frozen).
                      "interleave": ("interleaved", "not-reached"),
                      # A power cut follows a kill at the point.
                      "power-full": ("killed",), "power-normal": ("killed",)}
    # A fault of the machine that no statement needed to meet (nothing to write while the disk was
    # full) had no effect there: held, and shown as such in the report, as in the matrix.
    MACHINE_EXITS = ("faulted", "no-effect")

    def __init__(self, *, prepared: Any, index: int, fault: str = "crash", second: int = -1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prepared = prepared
        self.index = index
        self.fault = fault
        self.second = second

    def _replay_settings(self) -> list[str]:
        s = plugin_state(self.config).settings
        out: list[str] = []
        if self.plan.points is not None and self.plan.points.fault is None and self.fault != "crash":
            out += ["--chaos-faults", ",".join(s.faults)]
        if self.fault == "interleave" and s.pairs != PAIRS_DEFAULT:
            out += ["--chaos-pairs", str(s.pairs)]
        return out

    def _fields(self) -> dict[str, Any]:
        from chaos.plans.runner import item_name

        point = self.prepared.family.points[self.index]
        fields = {"kind": "point", "fault": self.fault, "group": self.parent.name if self.parent else "", "point": item_name(point),
                  "file": point.file, "line": point.line, "hit": point.hit, "function": point.function,
                  "source": _source(point.file, point.line)}
        if self.second >= 0:
            q = self.prepared.family.points[self.second]
            fields.update(second=item_name(q), second_file=q.file, second_line=q.line, pairs_possible=self.plan_file.pairs_possible)
        if self.plan_file.points_possible:  # a sample: the report says of how many points
            fields["points_possible"] = self.plan_file.points_possible
        return fields

    def runtest(self) -> None:
        from chaos.core import pristine
        from chaos.plans.runner import run_target_point

        state = plugin_state(self.config)
        if self.fault.startswith("io-"):
            from chaos.core import libfiu

            reason = libfiu.missing()
            if reason:
                pytest.skip(reason)
        if self.fault.startswith("power-"):
            from chaos.hostfaults.power import power_missing

            reason = power_missing()
            if reason and os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
                pytest.fail(f"CI=true and {reason}", pytrace=False)
            if reason:
                pytest.skip(reason)
        try:
            outcome, failures = pristine.call(
                run_target_point, self.plan, self.plan_file.target, self.prepared.workdir, self.index, state.points_dir(),
                seed=state.settings.seed, mode=state.settings.mode, faults=self.plan_file.faults(), fault=self.fault, second=self.second,
                allowed_effects=state.settings.allowed_effects,
            )
        except Exception as exc:  # the harness or the recovery broke: count it, then show the traceback
            self.record(**self._fields(), exit="error", held=False, violations=[], failures=[f"{type(exc).__name__}: {exc}"],
                        wasted=0, zombie=0, blocked_s=0.0, seconds=0.0)
            raise
        if outcome.exit not in self.EXPECTED_EXITS.get(self.fault, self.MACHINE_EXITS):
            failures = failures + [_not_killed(outcome.exit, self.fault)]
        extra = {}
        family_key = f"{self.plan_file.nodeid}@{self.plan_file.target}"
        if family_key not in state.sent_executable:  # once per process: the controller merges them
            state.sent_executable.add(family_key)
            extra["executable"] = {f: sorted(lines) for f, lines in self.prepared.family.executable.items()}
        rec = self.record(
            **self._fields(),
            exit=outcome.exit,
            held=outcome.held and not failures,
            violations=[[v.invariant, v.detail] for v in outcome.violations],
            failures=failures,
            wasted=outcome.wasted_calls,
            zombie=outcome.zombie_calls,
            blocked_s=round(outcome.blocked_s, 4),
            seconds=round(outcome.seconds, 5),
            **extra,
        )
        self.verdict(rec)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        point = self.prepared.family.points[self.index]
        verb = {"crash": "crash", "pause-live": "pause (lease valid)", "pause-expired": "pause (lease expired)"}.get(self.fault, self.fault)
        return self.path, None, f"{verb} at {self.name} ({os.path.basename(point.file)}:{point.line})"


class PlanBaseline(PlanItem):
    """``PLAN::baseline``: the plan's iteration with no crash must already hold."""

    def __init__(self, *, prepared: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.prepared = prepared

    def runtest(self) -> None:
        from chaos.plans.runner import expect_failures

        base = self.prepared.family.baseline
        failures: list[str] = []
        expect = self.plan.points.expect
        if expect is not None:
            calls: dict[str, int] = {}
            for key, count in base.calls.items():
                step = key.rpartition(":")[2]
                calls[step] = calls.get(step, 0) + count
            from collections import Counter

            failures = expect_failures(expect, states=base.final_states, calls_by_step=Counter(calls), applied=base.applied,
                                       wasted=base.wasted_calls, last_errors=base.last_errors)
        rec = self.record(
            kind="baseline",
            held=base.held and not failures,
            violations=[[v.invariant, v.detail] for v in base.violations],
            failures=failures,
            wasted=base.wasted_calls,
            seconds=round(base.seconds, 5),
        )
        self.verdict(rec)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, "baseline (no crash)"


class PlanScenario(PlanItem):
    """``PLAN::NAME``: a scripted scenario, drained and checked."""

    def __init__(self, *, scenario: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario

    def runtest(self) -> None:
        from chaos.plans.runner import run_scenario

        state = plugin_state(self.config)
        adapter = state.adapter(self.plan_file.target)
        directory = state.scratch("scenario")
        try:
            result = run_scenario(self.scenario, adapter, directory, seed=state.settings.seed)
        finally:
            shutil.rmtree(directory, ignore_errors=True)
        rec = self.record(
            kind="scenario",
            name=self.scenario.name,
            lesson=self.scenario.lesson,
            held=result.held,
            violations=[[v.invariant, v.detail] for v in result.violations],
            failures=result.failures,
            wasted=result.wasted_calls,
            seconds=round(result.seconds, 5),
        )
        if not rec["held"]:
            raise CrashFailure(explain(rec, plugin_state(self.config).explained))

    def reportinfo(self) -> tuple[Any, int | None, str]:
        return self.path, None, f"scenario {self.scenario.name}"


def _not_killed(exit_kind: str, fault: str = "crash") -> str:
    if exit_kind == "not-reached":
        return "the worker never reached this point when run again: the iteration is not deterministic"
    if fault in MACHINE_SUBKINDS:
        return f"the worker that met the {fault} fault ended with {exit_kind!r} instead of stopping at the point"
    if fault != "crash":
        return f"the frozen worker ended with {exit_kind!r} instead of stopping at the point"
    return f"the doomed worker ended with {exit_kind!r} instead of dying at the point (it raised an exception)"


def _source(path: str, line: int) -> str:
    import linecache

    return linecache.getline(path, line).strip()


def explain(rec: dict[str, Any], explained: set[str]) -> str:
    """The failure text of one record: what broke, what was seen, why it matters, how to replay.

    ``explained`` holds the invariants whose "why it matters" was printed already (and gets this
    record's): one unsafe step fails hundreds of points alike, with the same paragraph each time,
    so a later failure refers to the first.
    """
    from chaos.plans.runner import why
    from engine.terminal import printable

    out: list[str] = []
    if rec["kind"] == "point":
        where = f"family {rec['group']!r}" if rec.get("matrix") else f"the job in {rec['group']!r}"
        out.append(f"{_what_happened(rec.get('fault', 'crash'), rec['point'], where)}")
        out.append(f"  {os.path.relpath(rec['file']) if rec['file'].startswith(os.getcwd()) else rec['file']}:{rec['line']}: {rec['source']}")
        if rec.get("second"):
            out.append(f"  the second worker froze at {rec['second']}" if rec.get("exit") == "interleaved"
                       else f"  the second worker never reached {rec['second']}: it ran to its end")
    elif rec["kind"] == "baseline":
        out.append(f"family {rec['group']!r} without any crash" if rec.get("matrix") else "the plan's iteration without any crash")
    else:
        out.append(f"scenario {rec['name']!r}")
    for invariant, detail in rec["violations"]:
        out.append(f"VIOLATED {invariant}: {detail}")
        reason = why(invariant)
        if reason and invariant not in explained:
            out.append(f"  why it matters: {reason}")
            explained.add(invariant)
        elif reason:
            out.append(f"  why it matters: as in the first failure of {invariant} above")
    for failure in rec["failures"]:
        out.append(f"FAILED {failure}")
    out.append(f"lesson: {printable(rec['lesson'])}")  # a plan's own text: an escape sequence in it must not reach the terminal
    out.append(f"wasted calls: {rec['wasted']}")
    if rec.get("fault", "").startswith("power-"):
        out.append("the power was cut after the kill: every commit it took counted as an interruption of its step")
    elif rec.get("fault") in MACHINE_SUBKINDS:
        out.append(_showed(rec))
    elif rec.get("fault", "crash") != "crash":
        out.append(f"paid calls without a valid lease, after the memo was committed: {rec.get('zombie', 0)}; "
                   f"the other worker was blocked {rec.get('blocked_s', 0.0):.3f}s")
    out.append(f"replay: {rec['replay']}")
    return "\n".join(out)


def _what_happened(fault: str, point: str, where: str) -> str:
    """The first line of a point's failure text: what the harness did there."""
    if fault == "pause-live":
        return f"worker frozen at {point} ({where}); another worker ran with its lease still valid, then it resumed"
    if fault == "pause-expired":
        return f"worker frozen at {point} ({where}); its lease expired, another worker took the job over, then it resumed"
    if fault == "interleave":
        return f"worker A frozen at {point} ({where}), its lease expired; worker B ran, A resumed and finished, then B"
    if fault.startswith("power-"):
        return (f"worker killed at {point} ({where}), then the power cut ({fault}: the database's file system shut down, "
                "its journal unflushed) and restored; a fresh worker recovered from what survived")
    if fault in MACHINE_SUBKINDS:
        return f"{fault} at {point} ({where}): injected there, then removed; the same worker must survive it and drain"
    return f"crash at {point} ({where}), then recovery"


def _showed(rec: dict[str, Any]) -> str:
    """What a fault of the machine did at its point, in words."""
    from chaos.report.html import MACHINE_OUTCOMES, machine_outcome

    outcome = machine_outcome(rec)
    return MACHINE_OUTCOMES[outcome] if outcome else f"the fault never met the worker: it ended with {rec.get('exit')!r}"
