"""The summary pytest prints at the end of a run: a line of counts per fault kind, crash coverage,
the slowest points, then the failures as findings, each shown once.

>>> terminal_lines(Summary())
['0 crash points: 0 held, 0 violated; 0 wasted calls']
"""

from __future__ import annotations

from typing import Any

from chaos.core.findings import plural, record_findings
from chaos.report.summary import FAULT_LABELS, MACHINE_KIND_OF, Summary

__all__ = ["SLOWEST_MAX", "FINDINGS_SHOWN_MAX", "ALL_FAILURES_FLAG", "FINDING_DETAIL_MAX", "terminal_lines", "findings_lines"]


SLOWEST_MAX = 5
FINDINGS_SHOWN_MAX = 5  # findings the terminal summary shows in full; the rest are counted
ALL_FAILURES_FLAG = "--chaos-all-failures"  # chaos.plugin's flag that lists every failed point (a test checks they agree)
FINDING_DETAIL_MAX = 300  # characters of a finding's first detail in the terminal summary


def terminal_lines(summary: Summary, *, all_failures: bool = False, folded: int = 0) -> list[str]:
    """The summary pytest prints at the end of the run: counts, then the failures as findings
    (``all_failures``: and every failed point, scenario and baseline; ``folded``: how many failed
    items pytest was not shown, since a finding here stands for them)."""
    s = summary
    runs = f" ({s.modes()})" if s.modes() else ""
    rows = s.by_fault() or {"crash": {"scenarios": 0, "held": 0, "violated": 0, "wasted": 0}}
    out: list[str] = []
    for kind, row in rows.items():  # a line per fault kind that ran, crash first
        line = f"{row['scenarios']} {FAULT_LABELS.get(kind, kind)}: {row['held']} held, {row['violated']} violated; {row['wasted']} wasted calls"
        if kind == "interleave":
            line += f"; {row['scenarios']} pairs run of {row['pairs_possible']} possible"
        elif kind in MACHINE_KIND_OF:
            line += f"; the fault showed at {row['faulted']}, no effect at {row['no_effect']}"
        elif kind != "crash":
            line += f" ({row['zombie']} without a valid lease); other worker blocked {row['blocked_s']:.3f}s"
        out.append(line + (runs if not out else ""))
    hit, total, percent = s.coverage()
    if total and set(rows) - set(MACHINE_KIND_OF) - {"interleave"}:  # only a kill or a freeze at a line counts it
        what = "had a point killed" if set(rows) == {"crash"} else "had a point killed or frozen"
        out.append(f"crash coverage: {percent}% ({hit} of the {total} executable lines of the functions reached {what})")
    others = []
    if s.scenarios:
        passed = sum(1 for r in s.scenarios if r["held"])
        others.append(f"scenarios: {passed} passed, {len(s.scenarios) - passed} failed")
    if s.baselines:
        base_held = sum(1 for r in s.baselines if r["held"])
        others.append(f"baselines (no crash): {base_held} held, {len(s.baselines) - base_held} violated")
    if others:
        out.append("; ".join(others))
    failed = [r for r in s.failed if not r.get("known")]
    known = len(s.failed) - len(failed)
    slowest = sorted(s.points, key=lambda r: -r["seconds"])[:SLOWEST_MAX]
    if slowest and (not failed or all_failures):  # while the gate is red, its findings take the screen
        out.append("slowest points:")
        out += [f"  {r['seconds']:.3f}s {r.get('pytest_id', r['nodeid'])}" for r in slowest]
    if known:
        out.append(f"known findings: {plural(known, 'violated point or scenario', 'violated points or scenarios')}, "
                   "all in the file of known findings (not listed)")
    if failed:
        out += findings_lines(failed, all_failures=all_failures, folded=folded)
    return out


def findings_lines(failed: list[dict[str, Any]], *, all_failures: bool = False, folded: int = 0,
                   shown_max: int = FINDINGS_SHOWN_MAX) -> list[str]:
    """The failed records as findings, each once: its count, what was seen, the user's line, the
    fix for its cause and one replay command; then, with ``all_failures``, every failed record on
    a line of its own, else the flag that lists them (and how many failed items of fault plans
    pytest's failures leave out for them: ``folded``)."""
    groups = record_findings(failed)
    out = [f"findings: {plural(len(groups), 'finding')} in {plural(len(failed), 'violated point, baseline or scenario', 'violated points, baselines and scenarios')}"
           " (grouped by invariant and cause, each shown once):"]
    for group in groups[:shown_max]:
        out += group.lines("  ", FINDING_DETAIL_MAX)
    if len(groups) > shown_max:
        out.append(f"  ... and {plural(len(groups) - shown_max, 'finding')} more, with their failures above")
    if all_failures:
        out.append("violated:")
        for r in failed:
            what = [f"{inv}: {detail}" for inv, detail in r["violations"]] + list(r["failures"])
            out.append(f"  {r.get('pytest_id', r['nodeid'])}: {what[0] if what else 'failed'}")  # an id pytest accepts
    elif folded:
        out.append(f"{plural(folded, 'failed item')} of fault plans left out of pytest's failures and short summary, each "
                   f"failing for a finding above: {ALL_FAILURES_FLAG} lists every violated point (the JUnit XML and the "
                   "HTML report always have them all)")
    elif len(failed) > len(groups[:shown_max]):
        out.append(f"every violated point: {ALL_FAILURES_FLAG} lists each (the JUnit XML and the HTML report always have them all)")
    return out
