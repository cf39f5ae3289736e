"""The crash report as HTML: a self-contained index page and a page per traced source file.

The HTML page shows the traced source with line numbers, every line coloured by outcome the way
coverage.py colours coverage, across every fault kind: not a point, every point at the line held,
a point at the line violated an invariant, or an executable line no point killed or froze. A click
on a line shows its points: the fault kind, the invariant, what was seen, why it matters, the
wasted calls, how long a pause blocked the other worker, and the command that replays it.
Everything a user or the code under test wrote is escaped.

Both the page and the terminal summary are built from *records*, one plain dict per crash point,
baseline or scripted scenario (:mod:`chaos.report.summary` counts them, each fault kind on its
own; :mod:`chaos.report.terminal` prints them). This module's ``__all__`` also names the summary's,
the terminal's and the report path's public names, so that the report is used from one import.

>>> summary = summarize([{"kind": "scenario", "nodeid": "p.toml::s", "plan": "p.toml", "lesson": "L.",
...                       "held": True, "violations": [], "failures": [], "wasted": 0, "seconds": 0.1}])
>>> render_html(summary).startswith("<!doctype html>")
True
"""

from __future__ import annotations

import html
import linecache
import os
import re
from dataclasses import dataclass
from typing import Any

from chaos.core.findings import plural, record_findings, user_line
from chaos.core.unreachable import declared_unreachable
from chaos.core.whole_file import write_whole
from chaos.report.assets import CSS, JS, KEYS_HELP, LEGEND
from chaos.report.report_path import HEAD_BYTES, REPORT_TITLE, check_report_path, pages_folder
from chaos.report.summary import (FAULT_MEANING, FAULT_ORDER, MACHINE_KIND_OF, MACHINE_OUTCOMES, Summary, machine_outcome,
                                  summarize)
from chaos.report.terminal import ALL_FAILURES_FLAG, FINDINGS_SHOWN_MAX, findings_lines, terminal_lines

__all__ = [
    "Summary",
    "summarize",
    "terminal_lines",
    "findings_lines",
    "FINDINGS_SHOWN_MAX",
    "ALL_FAILURES_FLAG",
    "render_html",
    "write_html",
    "check_report_path",
    "render_pages",
    "pages_folder",
    "machine_outcome",
    "MACHINE_OUTCOMES",
]

CONTEXT_BEFORE = 3  # source lines shown before an executable line
CONTEXT_AFTER = 1
FOLD_GAP_MIN = 4  # hidden lines in a row below this count are shown instead of folded
PAGE_NAME_MAX = 120  # characters of a page's name kept (its end: the file's name)


def write_html(path: str, summary: Summary) -> None:
    """Write the report: its index to ``path``, a page per source file into :func:`pages_folder`.
    Each file is written whole or not at all (beside it, then renamed over it); the pages first,
    so that the index never links to a page not yet there, and pages an earlier report left that
    this one has not are removed."""
    folder = pages_folder(path)
    index, pages = render_pages(summary, index_name=os.path.basename(path), folder=os.path.basename(folder))
    if pages:
        os.makedirs(folder, exist_ok=True)
    for name, page in pages.items():
        write_whole(os.path.join(folder, name), page.encode("utf-8"))
    for name in os.listdir(folder) if os.path.isdir(folder) else ():
        stale = os.path.join(folder, name)
        if name.endswith(".html") and name not in pages and os.path.isfile(stale) and REPORT_TITLE.encode() in _head_quietly(stale):
            os.remove(stale)
    write_whole(path, index.encode("utf-8"))


def _head_quietly(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read(HEAD_BYTES)
    except OSError:
        return b""


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def render_html(summary: Summary) -> str:
    """The report's index page alone (its source pages: :func:`render_pages`)."""
    return render_pages(summary)[0]


def render_pages(summary: Summary, *, index_name: str = "report.html", folder: str = "report" + "_files") -> tuple[str, dict[str, str]]:
    """The index page (summary, the cause first when the workflow fails without any fault,
    findings, plans, the files with their figures) and a page per source file (the traced source,
    each line coloured by outcome), by file name inside ``folder``; every page self-contained
    (inline CSS and a few lines of JavaScript), linked to the index and to the files before and
    after it."""
    s = summary
    lay = _layout(s, index_name, folder)
    hit, total, percent = s.coverage()
    passed = sum(1 for r in s.scenarios if r["held"])
    only_crash = set(s.by_fault()) <= {"crash"}
    # Totals over every fault kind, so a violated pause can never hide behind a green card; the
    # table below the cards splits them by kind.
    cards = [
        ("points", len(s.points), "crash points" if only_crash else "points, all fault kinds", ""),
        ("held", s.held, "held", "good"),
        ("violated", s.violated, "violated", "bad" if s.violated else "good"),
        ("wasted", s.wasted, "wasted calls", ""),
        # A fault of the machine neither kills nor freezes at its point: it covers no line.
        ("coverage", f"{percent}%", f"crash coverage ({hit}/{total} lines)", "") if set(s.by_fault()) - set(MACHINE_KIND_OF) or not s.points
        else ("coverage", "\u2013", "crash coverage (no point killed or frozen)", ""),
        ("scenarios", f"{passed}/{len(s.scenarios)}", "scenarios passed", "bad" if passed < len(s.scenarios) else "good"),
    ]
    parts = _head(f"crashgate crash report: {len(s.points)} points, {s.violated} violated")
    parts += ['<header><h1>crashgate crash report</h1>', f'<p class="meta">{e(s.modes() or "no crash points")}</p>', *_sample(s), '</header>']
    parts += _cause(s, lay, "")
    parts.append('<section class="cards">')
    for key, value, label, tone in cards:
        parts.append(f'<div class="card {tone}"><div class="num" id="count-{key}">{e(value)}</div><div class="label">{e(label)}</div></div>')
    parts.append("</section>")
    parts += _faults(s)
    parts += _violations(s, lay)
    parts += _plans(s)
    parts += _files_index(s, lay)
    parts.append(f"{KEYS_HELP}<script>{JS}</script></body></html>")
    pages = {lay.pages[f]: _file_page(s, lay, n) for n, f in enumerate(lay.files)}
    return "\n".join(parts), pages


def _head(title: str) -> list[str]:
    return ["<!doctype html>",
            '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{e(title)}</title>", f"<style>{CSS}</style></head><body>"]


@dataclass
class _Layout:
    """Where everything goes: the files in order, each file's page, and which lines to mark."""

    files: list[str]  # the source files shown, in order
    pages: dict[str, str]  # file -> its page's name inside ``folder``
    index_name: str  # the index's file name, beside ``folder``
    folder: str
    culprits: dict[str, set[int]]  # file -> the user's lines the failures name
    causes: list[tuple[Any, str, int]]  # (finding, file, line) for each way the workflow fails without any fault
    symptoms: set[int]  # id() of the failed points a failure without any fault explains (not marked)

    def link(self, path: str, line: int | None = None, *, from_page: bool = False) -> str:
        """The href of ``path``'s page (at ``line``), from the index or from another page."""
        page = self.pages[path] if from_page else f"{self.folder}/{self.pages[path]}"
        return page + (f"#L{line}" if line else "")


def _layout(s: Summary, index_name: str, folder: str) -> _Layout:
    files = _file_order(s)
    where: dict[str, tuple[str, int]] = {}  # "path:line" a failure names -> (file, line)
    for r in s.failed:
        for _, detail in r["violations"]:
            named = user_line(detail)
            if named and named not in where:
                found = _resolve(s, files, named.rpartition(":")[0])
                if found:
                    where[named] = (found, int(named.rpartition(":")[2]))
                    if found not in files:  # a culprit in a file no point was killed in: shown all the same
                        files.append(found)
    culprits: dict[str, set[int]] = {}
    for path, line in where.values():
        culprits.setdefault(path, set()).add(line)
    groups = record_findings(s.failed) if s.failed else []
    causes = [(g, *where.get(g.where, ("", 0))) for g in groups if g.baselines]
    # A point is explained by a failure without any fault when it fails the same way (its
    # finding holds the baseline) or at the same user's line: one cause, marked once.
    cause_lines = {g.where for g, _, _ in causes if g.where}
    symptoms = {id(r) for g, _, _ in causes for r in g.records if r.get("kind") == "point"}
    for r in s.points:
        if not r["held"] and any(user_line(d) in cause_lines for _, d in r["violations"]):
            symptoms.add(id(r))
    pages: dict[str, str] = {}
    for path in files:
        name = re.sub(r"[^A-Za-z0-9]+", "_", s.short(path)).strip("_")[-PAGE_NAME_MAX:] or "source"
        while name + ".html" in pages.values():
            name += "_"
        pages[path] = name + ".html"
    return _Layout(files, pages, index_name, folder, culprits, causes, symptoms)


def _resolve(s: Summary, files: list[str], named: str) -> str:
    """The file a failure's ``path`` (as :func:`chaos.core.origin.shown` wrote it: relative to the
    run's folder, or absolute) is, among the files shown or on disk; "" if none."""
    for path in files:
        if path == named or s.short(path) == named or path.endswith(os.sep + named):
            return path
    for candidate in ([named] if os.path.isabs(named) else [os.path.join(s.rootdir or os.getcwd(), named), os.path.abspath(named)]):
        if os.path.isfile(candidate):
            return os.path.abspath(candidate)
    return ""


def _cause(s: Summary, lay: _Layout, on_page: str) -> list[str]:
    """The banner that leads when the workflow fails without any fault: a crash proves nothing
    then, so the cause comes first: the invariant, what was seen, the user's line, the fix."""
    if not lay.causes:
        return []
    out = ['<section id="cause"><h2>The workflow fails without any fault</h2>',
           "<p>Its run without any crash already breaks an invariant, so its crash points prove nothing until this is fixed; "
           "the points that fail the same way are not marked in the source.</p>"]
    for group, path, line in lay.causes:
        out.append(f'<p class="what"><b>{e(group.invariant)}</b> <span class="count">({e(group.counted())})</span>: {e(group.example)}</p>')
        if path:
            text = linecache.getline(path, line).strip()
            href = lay.link(path, line, from_page=bool(on_page))
            out.append(f'<p class="where">at <a id="cause-line" href="{e(href)}">{e(s.short(path))}:{line}</a>'
                       + (f" <code>{e(text)}</code>" if text else "") + "</p>")
        if group.fix:
            out.append(f'<p class="fix">fix: {e(group.fix)}</p>')
        out.append(f'<code class="replay">{e(group.first.get("replay", ""))}</code>')
    out.append("</section>")
    return out


def _file_order(s: Summary) -> list[str]:
    """The user's files first (not the harness's, not the reference engine's), then by violations."""
    files = set(s.executable) | {r["file"] for r in s.points}
    bad = {r["file"] for r in s.points if not r["held"]}
    count = {f: sum(1 for r in s.points if r["file"] == f) for f in files}
    return sorted(files, key=lambda f: (_is_library(f), f not in bad, -count[f], f))


def _is_library(path: str) -> bool:
    """Whether ``path`` is crashgate's own code (engine/ or chaos/), not the user's."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    return any(os.path.abspath(path).startswith(os.path.join(here, name) + os.sep) for name in ("engine", "chaos"))


def _sample(s: Summary) -> list[str]:
    """Where only a sample of the points ran, say so first, with how many of how many: a line
    with no point, and the coverage, then speak of the points drawn, not of the code."""
    sampled = s.sampled()
    if not sampled:
        return []
    ran, of = sum(n for _, n, _ in sampled), sum(m for _, _, m in sampled)
    each = "; ".join(f"{n:,} of {m:,} in <code>{e(plan)}</code>" for plan, n, m in sampled)
    return [f'<p class="sample" id="sample">A sample: <strong>{ran:,} of {of:,} points</strong> ran (<code>--chaos-points</code>, '
            f'seeded): {each}. The figures below count the points that ran; '
            f'run without <code>--chaos-points</code> for every point.</p>']


def _faults(s: Summary) -> list[str]:
    """A row per fault kind: scenarios, held, violated, wasted calls, calls without a lease, blocked time.
    Each number has an id (``fault-pause-live-violated``), for tests and for links."""
    rows = s.by_fault()
    if not rows:
        return []
    out = ['<section id="faults"><h2>By fault kind</h2><table class="plans faults">',
           ("<tr><th>fault</th><th>what happens at the point</th><th>scenarios</th><th>held</th><th>violated</th>"
            "<th>wasted calls</th><th>of them without a valid lease</th><th>other worker blocked</th>"
            "<th>the fault showed</th></tr>")]
    for kind, row in rows.items():
        tone = "bad" if row["violated"] else "good"
        count = str(row["scenarios"]) + (f' of {row["pairs_possible"]} pairs' if "pairs_possible" in row else "")
        paused = kind != "crash"
        showed = f'{row["faulted"]} of {row["scenarios"]}' if kind in MACHINE_KIND_OF else "&ndash;"
        cells = [("scenarios", count), ("held", row["held"]), ("violated", row["violated"]), ("wasted", row["wasted"]),
                 ("zombie", row["zombie"] if paused else "&ndash;"), ("blocked", f'{row["blocked_s"]:.3f}s' if kind in ("pause-live", "pause-expired") else "&ndash;"),
                 ("showed", showed)]
        out.append(f'<tr class="{tone}"><td><code>{e(kind)}</code></td><td>{e(FAULT_MEANING.get(kind, ""))}</td>'
                   + "".join(f'<td class="n" id="fault-{e(kind)}-{key}">{value if value == "&ndash;" else e(value)}</td>' for key, value in cells)
                   + "</tr>")
    out.append("</table></section>")
    return out


def _violations(s: Summary, lay: _Layout) -> list[str]:
    """The failures grouped by invariant and cause (as the command line groups them), each with
    its count, the user's line where the ledger knows it, its first point and its replay."""
    failed = s.failed
    if not failed:
        return ['<section id="violations" class="ok"><h2>No violations</h2>',
                "<p>Every crash point, baseline and scenario held.</p></section>"]
    ordered = record_findings(failed)
    out = [f'<section id="violations"><h2>{len(failed)} violated, in {plural(len(ordered), "finding")}</h2>'
           '<ol class="violations">']
    for group in ordered:
        r = group.first
        detail = group.example
        where = group.where
        link = ""
        if r["kind"] == "point":
            link = f' <a href="{e(lay.link(r["file"], r["line"]))}">{e(s.short(r["file"]))}:{r["line"]}</a>'
        baseline = bool(group.baselines)
        marks = ('<span class="tag baseline">without any fault</span> ' if baseline else "") + \
            (f'<span class="tag culprit">at {_culprit_link(s, lay, where)}</span> ' if where else "")
        fix = group.fix
        out.append(
            f'<li class="finding{" baseline" if baseline else ""}"><div class="head">{marks}<b>{e(group.invariant)}</b> '
            f'<span class="count">{plural(len(group.records), "item")}</span> <span class="seen">({e(group.counted())})</span></div>'
            f'<div>{e(detail)}</div>' + (f'<div class="fix">fix: {e(fix)}</div>' if fix else "")
            + f'<div class="first">first: <code class="nodeid">{e(r.get("pytest_id", r["nodeid"]))}</code>{link}</div>'
            f'<div class="lesson">{e(r["lesson"])}</div><code class="replay">{e(r.get("replay", ""))}</code></li>'
        )
    out.append("</ol></section>")
    return out


def _culprit_link(s: Summary, lay: _Layout, where: str) -> str:
    """``path:line`` a finding names, linked to its line where the file is shown."""
    path = _resolve(s, lay.files, where.rpartition(":")[0])
    if path in lay.pages:
        return f'<a href="{e(lay.link(path, int(where.rpartition(":")[2])))}">{e(where)}</a>'
    return e(where)


def _plans(s: Summary) -> list[str]:
    plans: dict[str, dict[str, Any]] = {}
    for r in s.baselines + s.points + s.scenarios:
        p = plans.setdefault(r["plan"], {"lesson": r["lesson"], "points": 0, "violated": 0, "scenarios": 0, "failed": 0})
        if r["kind"] == "point":
            p["points"] += 1
            p["violated"] += not r["held"]
        elif r["kind"] == "scenario":
            p["scenarios"] += 1
            p["failed"] += not r["held"]
        else:
            p["violated"] += not r["held"]
    out = ['<section id="plans"><h2>Plans and what each teaches</h2><table class="plans">',
           "<tr><th>plan</th><th>lesson</th><th>points</th><th>violated</th><th>scenarios</th></tr>"]
    for name, p in sorted(plans.items()):
        tone = "bad" if p["violated"] or p["failed"] else "good"
        scen = f'{p["scenarios"] - p["failed"]}/{p["scenarios"]} passed' if p["scenarios"] else ""
        out.append(
            f'<tr class="{tone}"><td><code>{e(name)}</code></td><td>{e(p["lesson"])}</td>'
            f'<td class="n">{p["points"]}</td><td class="n">{p["violated"]}</td><td>{e(scen)}</td></tr>'
        )
    out.append("</table></section>")
    return out


def _by_line(s: Summary) -> dict[tuple[str, int], list[dict[str, Any]]]:
    by_line: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in s.points:
        by_line.setdefault((r["file"], r["line"]), []).append(r)
    return by_line


def _figures(s: Summary, lay: _Layout, path: str, by_line: dict[tuple[str, int], list[dict[str, Any]]]) -> dict[str, Any]:
    """A file's figures: the points killed, frozen or faulted at its lines, how many of those
    violated, the failed items that name one of its lines (where the user's code raised, sent or
    paid from, wherever the point was: under a sample, often in the engine), and its crash coverage."""
    here = [r for (f, _), v in by_line.items() if f == path for r in v]
    executable = s.reachable().get(path, set())
    killed = s.killed_lines().get(path, set())
    from_here = sum(1 for r in s.failed if any(_names(s, path, user_line(d)) for _, d in r["violations"]))
    return {
        "points": len(here),
        "violated": sum(1 for r in here if not r["held"]),
        "named": from_here,
        "coverage": round(100.0 * len(executable & killed) / len(executable), 1) if executable else None,
    }


def _names(s: Summary, path: str, where: str) -> bool:
    """Whether ``where`` (``path:line`` a failure names) is a line of ``path``."""
    named = where.rpartition(":")[0]
    return bool(named) and (path == named or s.short(path) == named or path.endswith(os.sep + named))


def _files_index(s: Summary, lay: _Layout) -> list[str]:
    """The list of files, each linked to its page, with its figures; sortable and filterable."""
    if not lay.files:
        return []
    by_line = _by_line(s)
    out = ['<section id="source"><h2>Traced source</h2>',
           '<p class="controls"><input id="file-filter" type="search" placeholder="filter files" aria-label="filter files"> '
           f'<span class="meta">{plural(len(lay.files), "file")}, a page each: click one, or press '
           f'<a id="next-file" href="{e(lay.link(lay.files[0]))}"><kbd>]</kbd> for the first</a> '
           f'(<a id="prev-file" href="{e(lay.link(lay.files[-1]))}"><kbd>[</kbd> the last</a>; <kbd>?</kbd> the keys)</span></p>',
           '<table class="index plans" id="file-index"><thead><tr><th data-key="file">file</th><th data-key="points">points</th>'
           '<th data-key="violated">violated</th><th data-key="named">failures naming a line of it</th>'
           '<th data-key="coverage">crash coverage</th></tr></thead><tbody>']
    for path in lay.files:
        fig = _figures(s, lay, path, by_line)
        mine = "" if _is_library(path) else " mine"
        coverage = "&ndash;" if fig["coverage"] is None else f'{fig["coverage"]}%'
        out.append(f'<tr class="{"bad" if fig["violated"] or fig["named"] else "ok"}{mine}" data-file="{e(s.short(path))}" '
                   f'data-points="{fig["points"]}" data-violated="{fig["violated"]}" data-named="{fig["named"]}" '
                   f'data-coverage="{-1 if fig["coverage"] is None else fig["coverage"]}">'
                   f'<td><a href="{e(lay.link(path))}">{e(s.short(path))}</a></td><td class="n">{fig["points"]}</td>'
                   f'<td class="n">{fig["violated"]}</td><td class="n">{fig["named"]}</td><td class="n">{coverage}</td></tr>')
    out.append("</tbody></table>")
    out.append("</section>")
    return out


def _file_page(s: Summary, lay: _Layout, n: int) -> str:
    """One source file's page: where it is among the files, its figures, the cause when the
    workflow fails without any fault, then its traced source."""
    path = lay.files[n]
    by_line = _by_line(s)
    fig = _figures(s, lay, path, by_line)
    coverage = "&ndash;" if fig["coverage"] is None else f'{fig["coverage"]}%'
    nav = [f'<a id="to-index" href="../{e(lay.index_name)}">&larr; index <kbd>u</kbd></a>']
    if n > 0:
        nav.append(f'<a id="prev-file" href="{e(lay.pages[lay.files[n - 1]])}"><kbd>[</kbd> {e(s.short(lay.files[n - 1]))}</a>')
    if n + 1 < len(lay.files):
        nav.append(f'<a id="next-file" href="{e(lay.pages[lay.files[n + 1]])}">{e(s.short(lay.files[n + 1]))} <kbd>]</kbd></a>')
    nav.append('<span class="keys-hint">file ' + f"{n + 1} of {len(lay.files)} &middot; <kbd>j</kbd>/<kbd>k</kbd> marked lines "
               "&middot; <kbd>?</kbd> keys</span>")
    parts = _head(f"crashgate crash report: {s.short(path)}")
    parts += [f'<nav class="pages">{" ".join(nav)}</nav>', f'<header><h1 class="file">{e(s.short(path))}</h1>',
              f'<p class="meta" id="file-figures">{plural(fig["points"], "point")}, {fig["violated"]} violated; '
              f'{plural(fig["named"], "failure")} naming a line of it; crash coverage {coverage}</p></header>']
    parts += _cause(s, lay, lay.pages[path])
    parts += [LEGEND, '<p class="controls"><label><input id="hide-held" type="checkbox"> hide held lines</label></p>']
    parts += _file_table(s, lay, path, by_line)
    parts.append(f"{KEYS_HELP}<script>{JS}</script></body></html>")
    return "\n".join(parts)


def _file_table(s: Summary, lay: _Layout, path: str, by_line: dict[tuple[str, int], list[dict[str, Any]]]) -> list[str]:
    lines = linecache.getlines(path)
    killed = s.killed_lines().get(path, set())
    culprits = lay.culprits.get(path, set())
    executable = s.executable.get(path, set()) | {line for (f, line) in by_line if f == path} | culprits
    declared = declared_unreachable(path)  # no iteration reaches them: not shown as missed
    if not lines:
        return [f"<p>source not readable: {e(path)}</p>"]
    shown = _shown_lines(executable, len(lines))
    out = ['<table class="code"><colgroup><col class="ln"><col class="badge"><col></colgroup>']
    previous = 0
    for number in shown:
        if number > previous + 1:
            out.append(f'<tr class="fold"><td class="ln"></td><td colspan="2">&#8943; lines {previous + 1}&ndash;{number - 1}</td></tr>')
        previous = number
        text = e(lines[number - 1].rstrip("\n"))
        points = by_line.get((path, number), [])
        row_id = f"L{number}"
        details = f'<details><summary><code>{text}</code></summary>{_point_details(s, points, lay)}</details>' if points else f"<code>{text}</code>"
        if number in culprits:  # the user's line a finding names, whatever was killed there
            out.append(f'<tr class="culprit" id="{row_id}"><td class="ln">{number}</td><td class="badge">the culprit</td>'
                       f'<td class="src">{details}</td></tr>')
            continue
        if points:
            bad = [r for r in points if not r["held"]]
            explained = bool(bad) and all(id(r) in lay.symptoms for r in bad)  # the failure without any fault, again
            tone = "symptom" if explained else "violated" if bad else "held"  # across every fault kind at the line
            badge = (f"{len(bad)}/{len(points)} as without a fault" if explained else
                     f"{len(bad)}/{len(points)} violated" if bad else f"{len(points)} held")
            out.append(f'<tr class="{tone}" id="{row_id}"><td class="ln">{number}</td><td class="badge" title="{e(_kind_counts(points))}">'
                       f'{e(badge)}</td><td class="src">{details}</td></tr>')
        else:
            tone = "missed" if number in executable and number not in killed and number not in declared and number not in culprits else "plain"
            out.append(f'<tr class="{tone}" id="{row_id}"><td class="ln">{number}</td><td class="badge"></td><td class="src">{details}</td></tr>')
    if previous < len(lines):
        out.append(f'<tr class="fold"><td class="ln"></td><td colspan="2">&#8943; lines {previous + 1}&ndash;{len(lines)}</td></tr>')
    out.append("</table>")
    return out


def _shown_lines(executable: set[int], count: int) -> list[int]:
    """The executable lines with a little context; short gaps are shown, long ones folded."""
    wanted: set[int] = set()
    for line in executable:
        wanted.update(range(max(1, line - CONTEXT_BEFORE), min(count, line + CONTEXT_AFTER) + 1))
    ordered = sorted(wanted)
    filled: list[int] = []
    for line in ordered:
        if filled and 1 < line - filled[-1] <= FOLD_GAP_MIN:
            filled.extend(range(filled[-1] + 1, line))
        filled.append(line)
    return filled


def _kind_counts(points: list[dict[str, Any]]) -> str:
    """``crash 2, pause-live 2, pause-expired 2``: the points at a line, per fault kind."""
    counts: dict[str, int] = {}
    for r in points:
        counts[r.get("fault", "crash")] = counts.get(r.get("fault", "crash"), 0) + 1
    rank = {kind: n for n, kind in enumerate(FAULT_ORDER)}
    return ", ".join(f"{kind} {n}" for kind, n in sorted(counts.items(), key=lambda kv: rank.get(kv[0], len(rank))))


EXPECTED_EXITS = ("killed", "paused", "interleaved", "faulted")  # the exit each fault kind aims for


def _point_details(s: Summary, points: list[dict[str, Any]], lay: _Layout | None = None) -> str:
    from chaos.plans.runner import why

    rank = {kind: n for n, kind in enumerate(FAULT_ORDER)}
    points = sorted(points, key=lambda r: (r["held"], rank.get(r.get("fault", "crash"), len(rank)), r["nodeid"]))
    out = ['<div class="points">']
    for r in points:
        tone = "held" if r["held"] else "violated"
        label = "held" if r["held"] else "VIOLATED"
        fault = r.get("fault", "crash")
        if r.get("exit") not in (None, *EXPECTED_EXITS) and not (fault == "interleave" and r.get("exit") == "not-reached") \
                and machine_outcome(r) != "unreported":
            label += f" ({r['exit']})"
        extra = f' &middot; other worker blocked {r.get("blocked_s", 0.0):.3f}s' if fault in ("pause-live", "pause-expired") else ""
        classes = f"{fault} machine" if fault in MACHINE_KIND_OF else fault
        out.append(f'<div class="pt {tone}"><div class="head"><span class="tag">{e(label)}</span> <span class="fault {e(classes)}">{e(fault)}</span> '
                   f'<code>{e(r["nodeid"])}</code>'
                   f'<span class="wasted">{r["wasted"]} wasted call{"s" if r["wasted"] != 1 else ""}{extra} &middot; {r["seconds"]:.3f}s</span></div>')
        out.append(f'<div class="what">{e(FAULT_MEANING.get(fault, ""))}</div>')
        outcome = machine_outcome(r)
        if outcome is not None:
            out.append(f'<div class="what outcome {e(outcome)}">{e(MACHINE_OUTCOMES[outcome])}</div>')
        if r.get("second"):
            where = e(r["second"])
            if lay is not None and r.get("second_file") in lay.pages:
                where = f'<a href="{e(lay.link(r["second_file"], r["second_line"], from_page=True))}">{where}</a>'
            reached = "froze at" if r.get("exit") == "interleaved" else "never reached"
            out.append(f'<div class="what">worker B {reached} {where}</div>')
        if r.get("zombie"):
            out.append(f'<div class="what">{plural(r["zombie"], "paid call")} without a valid lease, after the memo was committed</div>')
        for inv, detail in r["violations"]:
            out.append(f'<div class="inv"><b>{e(inv)}</b>: {e(detail)}<div class="why">{e(why(inv))}</div></div>')
        for failure in r["failures"]:
            out.append(f'<div class="inv">{e(failure)}</div>')
        if not r["held"]:
            out.append(f'<div class="lesson">{e(r["lesson"])}</div>')
        if r.get("replay"):
            out.append(f'<code class="replay">{e(r["replay"])}</code>')
            if r.get("replay_cli"):
                out.append(f'<div class="what">outside pytest:</div><code class="replay">{e(r["replay_cli"])}</code>')
        out.append("</div>")
    out.append("</div>")
    return "".join(out)
