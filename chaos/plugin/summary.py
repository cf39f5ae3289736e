"""What the plugin says at the end of a run, in the controller: the crashgate section of pytest's
terminal summary (each finding once, the allowed effects, the known findings), pytest's failures
folded into those findings, the HTML report, and under GitHub Actions one ``::error`` annotation
per finding.

:class:`Reporter` collects the records of every item (from this process or, under pytest-xdist,
from the workers' reports); :class:`FoldFailures` folds the failures of fault-plan items into the
findings of the summary while pytest writes its own sections.
"""

from __future__ import annotations

from typing import Any, Iterator

import pytest

from chaos.plugin.records import RECORD_KEY, all_known, record_family, record_keys
from chaos.plugin.state import PluginState

__all__ = ["FOLD_MIN", "KNOWN_SHOWN_MAX", "Folded", "FoldFailures", "Reporter", "allowed_lines", "annotation_lines", "known_lines"]

FOLD_MIN = 2  # failed fault-plan items of one finding from which the summary stands for them in pytest's failures


class Reporter:
    """Collects every crashgate record (from this process's items or, under xdist, from the
    workers' reports) and prints the summary once, in the controller."""

    def __init__(self, state: PluginState) -> None:
        self.state = state

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        records = [value for key, value in report.user_properties if key == RECORD_KEY]
        self.state.records.extend(records)
        if report.failed:  # what GitHub annotations are made of: an xfail or a pass is not annotated
            self.state.failed_records.extend(records)

    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
        if hasattr(config, "workerinput"):  # an xdist worker: the controller prints the summary
            return
        state = self.state
        if not state.records:
            if state.settings.report:
                terminalreporter.write_line(f"crashgate: no crash points or scenarios ran; no report written to {state.settings.report}")
            return
        from chaos.report.html import summarize, terminal_lines, write_html

        _mark_known(state)
        summary = summarize(state.records, rootdir=str(config.rootpath))
        _one_line_messages(state, state.folded.original if state.folded else terminalreporter.stats.get("failed", []))
        terminalreporter.section("crashgate")
        folded = state.folded
        for line in terminal_lines(summary, all_failures=state.settings.all_failures, folded=len(folded.hidden) if folded else 0):
            terminalreporter.write_line(line)
        for line in allowed_lines(state):
            terminalreporter.write_line(line)
        if folded is not None:  # pytest's short summary, next, names one failed item of each finding
            folded.show_representatives(terminalreporter)
        if state.settings.known_file:
            for line in known_lines(state.records, state.settings.known, state.settings.known_file):
                terminalreporter.write_line(line)
        from chaos.core.annotations import on_github_actions

        if on_github_actions():  # GitHub reads workflow commands from any line of the step's output
            for line in annotation_lines(state.failed_records, state.settings.known, rootdir=str(config.rootpath)):
                terminalreporter.write_line(line)
        if state.settings.report:
            try:
                write_html(state.settings.report, summary)
            except OSError as exc:  # the disk filled up during the run, say: said in one line, nothing half-written
                terminalreporter.write_line(f"crashgate: the report could not be written to {state.settings.report} ({exc}); nothing was written there")
            else:
                terminalreporter.write_line(f"crash report: {state.settings.report}")


def allowed_lines(state: PluginState) -> list[str]:
    """What the run declared is no effect on the world (``--chaos-allow-effects`` and each target
    adapter's ``allowed_effects``): said in the summary, since each entry is a hole in
    ``effects-through-outbox`` that a reader of the gate's output must be able to see."""
    from chaos.adapter import allowed_effects

    out = []
    if state.settings.allowed_effects:
        source = state.settings.sources.get("allow_effects", "the settings")
        out.append(f"effects allowed (from {source}), not findings: {', '.join(state.settings.allowed_effects)}")
    for target in sorted({rec["target"] for rec in state.records if rec.get("target")}):
        try:
            entries = allowed_effects(state.adapter(target))
        except ValueError:
            continue  # the adapter's own error was the run's
        if entries:
            out.append(f"effects allowed (by the adapter {target}), not findings: {', '.join(map(str, entries))}")
    return out


def _mark_known(state: PluginState) -> None:
    """A record whose every violation is a known finding is not listed as new."""
    for rec in state.records:
        if not rec["held"] and rec.get("violations") and not rec.get("failures") and all_known(rec, state.settings.known):
            rec["known"] = True


class Folded:
    """The failed reports of fault-plan items that the crashgate summary stands for.

    One unsafe step fails hundreds of plan items alike; pytest would print each in its failures
    section and again in its short summary, burying the one finding under them. The crashgate
    summary shows each finding once (count, user's line, fix, replay), so the items of a finding
    it shows are taken out of the terminal reporter's failed list while pytest writes its failures
    section, the first item of each finding in each plan is put back for the short summary (a line
    pytest users know how to rerun), and every one is back before pytest counts the outcomes: the exit code, the counts,
    the JUnit XML and the HTML report are those of every item.
    """

    def __init__(self, original: list[Any], hidden: list[Any], representatives: list[Any]) -> None:
        self.original = original
        self.hidden = hidden
        self.representatives = representatives

    def show_representatives(self, terminalreporter: Any) -> None:
        keep = {id(rep) for rep in self.representatives}
        hidden = {id(rep) for rep in self.hidden} - keep
        terminalreporter.stats["failed"] = [rep for rep in self.original if id(rep) not in hidden]


def _fold(state: PluginState, failed: list[Any]) -> Folded | None:
    """Which failed reports the summary stands for: the fault-plan items (one record each) of a
    finding the summary shows in full, when at least :data:`FOLD_MIN` of them failed (a finding
    of one item is that item: its own failure text says more). The first item of each such
    finding in each plan stays in the short summary: a failing plan keeps a line. A crash_matrix test is one test whose own text leads
    with its findings: it stays, as does any test that is not crashgate's."""
    from chaos.core.findings import record_findings
    from chaos.report.html import FINDINGS_SHOWN_MAX

    _mark_known(state)
    groups = record_findings([r for r in state.records if not r["held"] and not r.get("known")])
    shown = {_record_group(group.records[0]) for group in groups[:FINDINGS_SHOWN_MAX]}
    items: dict[tuple[str, str], list[tuple[str, Any]]] = {}
    for rep in failed:
        records = [value for key, value in getattr(rep, "user_properties", ()) if key == RECORD_KEY]
        if len(records) == 1 and not records[0].get("matrix") and records[0].get("kind") in ("point", "baseline", "scenario"):
            key = _record_group(records[0])
            if key in shown:
                items.setdefault(key, []).append((records[0]["plan"], rep))
    hidden: list[Any] = []
    representatives: dict[tuple[tuple[str, str], str], Any] = {}  # the first item of each finding in each plan
    for key, reps in items.items():
        if len(reps) >= FOLD_MIN:
            hidden += [rep for _, rep in reps]
            for plan, rep in reps:
                representatives.setdefault((key, plan), rep)
    return Folded(list(failed), hidden, list(representatives.values())) if hidden else None


def _record_group(rec: dict[str, Any]) -> tuple[str, str]:
    """The finding a failed record belongs to (as :func:`chaos.core.findings.record_findings` groups it)."""
    from chaos.core.findings import group_key

    invariant, detail = rec["violations"][0] if rec["violations"] else ("expectation", rec["failures"][0] if rec["failures"] else "failed")
    return group_key(invariant, detail)


def _one_line_messages(state: PluginState, failed: list[Any]) -> None:
    """Cut the messages of crashgate's failed reports to their first line for pytest's short
    summary, which prints them whole where ``CI`` is set (the failures section above has them
    whole already): one line per item, as on a terminal. :class:`FoldFailures` puts them back."""
    for rep in failed:
        if not any(key == RECORD_KEY for key, _ in getattr(rep, "user_properties", ())):
            continue
        # pytest reads a failure's message from its text, or from its crash entry.
        holder, attribute = (rep, "longrepr") if isinstance(rep.longrepr, str) else (getattr(rep.longrepr, "reprcrash", None), "message")
        message = getattr(holder, attribute, None)
        if isinstance(message, str) and "\n" in message:
            state.shortened.append((holder, attribute, message))
            setattr(holder, attribute, message.split("\n", 1)[0])


class FoldFailures:
    """Folds the failures of fault-plan items into the findings of the crashgate summary while
    pytest writes its failures section and short summary (see :class:`Folded`)."""

    def __init__(self, state: PluginState) -> None:
        self.state = state

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: Any, exitstatus: int, config: pytest.Config) -> Iterator[None]:
        try:
            return (yield from self._folded(terminalreporter, config))
        finally:  # the messages the short summary had on one line (see _one_line_messages)
            for holder, attribute, message in self.state.shortened:
                setattr(holder, attribute, message)
            self.state.shortened = []

    def _folded(self, terminalreporter: Any, config: pytest.Config) -> Iterator[None]:
        state = self.state
        failed = terminalreporter.stats.get("failed", [])
        if hasattr(config, "workerinput") or state.settings.all_failures or not failed or not state.records:
            return (yield)
        state.folded = _fold(state, failed)
        if state.folded is None:
            return (yield)
        hidden = {id(rep) for rep in state.folded.hidden}
        terminalreporter.stats["failed"] = [rep for rep in failed if id(rep) not in hidden]
        try:
            return (yield)
        finally:  # pytest counts the outcomes after this hook: every item counts
            terminalreporter.stats["failed"] = state.folded.original
            state.folded = None


KNOWN_SHOWN_MAX = 20  # known findings no longer seen that the summary names (the rest are counted)


def known_lines(records: list[dict[str, Any]], known: frozenset, known_file: str) -> list[str]:
    """What the summary says of the file of known findings: how many were seen, how many new, and
    the known ones no longer seen, among the families and faults that ran (a family or a fault
    that did not run says nothing of its findings)."""
    from chaos.core.annotations import shown_path
    from chaos.core.findings import known_line

    seen: set[tuple[str, str, str, str]] = set()
    ran: set[tuple[str, str]] = set()
    for rec in records:
        if rec.get("kind") in ("point", "baseline"):
            seen.update(record_keys(rec))
            ran.add((record_family(rec), "" if rec["kind"] == "baseline" else rec.get("fault", "crash")))
    shown = shown_path(known_file)
    gone = sorted(key for key in set(known) - seen if (key[0], key[1]) in ran)
    out = [f"known findings (in {shown}): {len(seen & known)} seen, {len(seen - known)} new"]
    if gone:
        out.append(f"known findings no longer seen ({len(gone)}), to drop from {shown}:")
        out += [f"  {known_line(key)}" for key in gone[:KNOWN_SHOWN_MAX]]
        if len(gone) > KNOWN_SHOWN_MAX:
            out.append(f"  ... and {len(gone) - KNOWN_SHOWN_MAX} more")
    return out


def annotation_lines(records: list[dict[str, Any]], known: frozenset = frozenset(), *, rootdir: str = "") -> list[str]:
    """GitHub ``::error`` commands for failed records: per crash_matrix test and per fault plan,
    one per finding group (:func:`chaos.core.annotations.annotations`, as the command line prints
    them), each with the pytest command that replays it; known findings are left out. A file is
    named relative to the repository (the git work tree of the working directory, else
    ``rootdir``), and only when it lies in it."""
    from chaos.core.annotations import annotations, repository_root
    from chaos.core.invariants import Violation
    from chaos.core.points import Point
    from chaos.core.scenario import Outcome
    from chaos.matrix.runner import MatrixReport, PointResult

    by_test: dict[str, list[dict[str, Any]]] = {}
    for rec in records:
        if rec.get("kind") in ("point", "baseline"):
            by_test.setdefault(rec["plan"], []).append(rec)
    out: list[str] = []
    for recs in by_test.values():
        report = MatrixReport(recs[0]["target"], recs[0]["mode"], recs[0]["seed"])
        replays: dict[str, str] = {}
        for rec in recs:
            family, violations = record_family(rec), [Violation(inv, detail) for inv, detail in rec["violations"]]
            if rec["kind"] == "baseline":
                report.baselines[family] = Outcome("baseline", "finished", violations=violations)
                replays[family] = rec["replay"]
            else:
                point = Point(rec["file"], rec["line"], rec["hit"], rec["function"])
                outcome = Outcome(rec["point"], rec["exit"], fault=rec["fault"], violations=violations)
                report.results.append(PointResult(family, point, rec["source"], outcome, rec["replay"]))
        first_replay = recs[0]["replay"]
        out += annotations(report, known, family_replay=lambda family, replays=replays, first=first_replay: replays.get(family, first),
                           root=repository_root(rootdir=rootdir))
    return out
