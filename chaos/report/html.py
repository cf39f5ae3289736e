"""The crash report: a terminal summary and a self-contained HTML page.

Both are built from *records*, one plain dict per crash point, baseline or scripted scenario,
written by the pytest plugin into each test report's ``user_properties`` (so that under
pytest-xdist they travel from the workers to the controller, which prints the summary once).

Every fault kind is counted on its own (a crash, a pause with the frozen worker's lease still
valid, one with it expired, an interleaving of two workers, and each fault of the machine: a full
disk, an I/O error, a held write lock, a clock jump, a damaged row), beside the others: a line each
in the terminal, a row each in the page's table. For a fault of the machine both also say at how
many points it showed (the worker met it) and at how many it had no effect.

The HTML page shows the traced source with line numbers, every line coloured by outcome the way
coverage.py colours coverage, across every fault kind: not a point, every point at the line held,
a point at the line violated an invariant, or an executable line no point killed or froze. A click
on a line shows its points: the fault kind, the invariant, what was seen, why it matters, the
wasted calls, how long a pause blocked the other worker, and the command that replays it.
Everything a user or the code under test wrote is escaped.

>>> summary = summarize([{"kind": "scenario", "nodeid": "p.toml::s", "plan": "p.toml", "lesson": "L.",
...                       "held": True, "violations": [], "failures": [], "wasted": 0, "seconds": 0.1}])
>>> terminal_lines(summary)[0]
'0 crash points: 0 held, 0 violated; 0 wasted calls'
"""

from __future__ import annotations

import errno
import html
import linecache
import os
import stat
import tempfile
from dataclasses import dataclass, field
from typing import Any

from chaos.core.findings import plural, record_findings, user_line
from chaos.core.unreachable import declared_unreachable
from chaos.core.whole_file import write_whole

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
    "machine_outcome",
    "MACHINE_OUTCOMES",
]

SLOWEST_MAX = 5
EXERCISED_EXITS = ("killed", "paused")  # the worker was stopped at the point (killed, or frozen)
# The faults of the machine, by sub-kind (chaos.hostfaults.faults.KIND_OF; a test checks they agree).
MACHINE_KIND_OF = {
    "disk-full": "disk", "io-eio": "io", "io-enospc": "io", "lock-held": "lock", "clock-back": "clock",
    "clock-forward": "clock", "clock-skew": "clock", "damage-payload": "damage", "damage-state": "damage", "damage-memo": "damage",
    "power-full": "power", "power-normal": "power",
}
# The kinds of fault at a point, in the order they are shown (chaos.plans.runner.ITEM_FAULTS).
FAULT_ORDER = ("crash", "pause-live", "pause-expired", "interleave", *MACHINE_KIND_OF)
FAULT_LABELS = {
    "crash": "crash points",
    "pause-live": "pause-live scenarios",
    "pause-expired": "pause-expired scenarios",
    "interleave": "interleavings",
    **{sub: f"{sub} scenarios" for sub in MACHINE_KIND_OF},
}
FAULT_MEANING = {
    "crash": "the worker killed at the point, then recovery",
    "pause-live": "the worker frozen at the point while another runs, its lease still valid",
    "pause-expired": "the worker frozen at the point while another takes over its expired lease",
    "interleave": "worker A frozen at P, B run to Q and frozen, A resumed, then B",
    "disk-full": "the disk is full from the point on (SQLITE_FULL at the next write that needs a page); then space is back",
    "io-eio": "write, pwrite and fsync fail with EIO from the point on (libfiu); then the disk answers again",
    "io-enospc": "write and pwrite fail with ENOSPC from the point on (libfiu); then there is space again",
    "lock-held": "another process holds the write lock from the point on, past the busy timeout; then it lets go",
    "clock-back": "with the worker frozen at the point, every clock steps back an hour and another worker runs",
    "clock-forward": "with the worker frozen at the point, every clock leaps three hours and another worker runs",
    "clock-skew": "the frozen worker's lease is taken over, then only its own clock steps back an hour",
    "damage-payload": "with the worker frozen at the point, a job's payload is overwritten with what is not JSON",
    "damage-state": "with the worker frozen at the point, a job's state is overwritten with one the table does not know",
    "damage-memo": "with the worker frozen at the point, a memo row's output is overwritten with what is not JSON",
    "power-full": "the worker killed at the point, then the power cut (ext4 shut down, journal unflushed), at synchronous=FULL",
    "power-normal": "the worker killed at the point, then the power cut (ext4 shut down, journal unflushed), at synchronous=NORMAL",
}
# What a fault of the machine did at its point, from the record's exit (chaos.hostfaults.faults)
# and whether it held: see machine_outcome().
MACHINE_OUTCOMES = {
    "faulted": "the fault showed: the worker met it at this point",
    "unreported": "the fault showed, though the worker's loop never reported an error from it: "
                  "the worker died or stalled on it, and a check failed",
    "no-effect": "the fault had no effect here: no statement needed what it took away, or there was nothing to damage",
}
FINDINGS_SHOWN_MAX = 5  # findings the terminal summary shows in full; the rest are counted
ALL_FAILURES_FLAG = "--chaos-all-failures"  # chaos.plugin's flag that lists every failed point (a test checks they agree)
FINDING_DETAIL_MAX = 300  # characters of a finding's first detail in the terminal summary
CONTEXT_BEFORE = 3  # source lines shown before an executable line
CONTEXT_AFTER = 1
FOLD_GAP_MIN = 4  # hidden lines in a row below this count are shown instead of folded


@dataclass
class Summary:
    points: list[dict[str, Any]] = field(default_factory=list)
    scenarios: list[dict[str, Any]] = field(default_factory=list)
    baselines: list[dict[str, Any]] = field(default_factory=list)
    executable: dict[str, set[int]] = field(default_factory=dict)
    rootdir: str = ""

    @property
    def held(self) -> int:
        return sum(1 for r in self.points if r["held"])

    @property
    def violated(self) -> int:
        return len(self.points) - self.held

    @property
    def wasted(self) -> int:
        return sum(r["wasted"] for r in self.points)

    @property
    def failed(self) -> list[dict[str, Any]]:
        """Every record that did not hold: points, baselines and scenarios."""
        return [r for r in self.baselines + self.points + self.scenarios if not r["held"]]

    def by_fault(self) -> dict[str, dict[str, Any]]:
        """Per fault kind, in :data:`FAULT_ORDER`: scenarios, held, violated, wasted calls, paid
        calls made without a valid lease, the other worker's blocked time, (for interleavings) how
        many pairs exist, and (for a fault of the machine) at how many points it showed
        (``faulted``) and at how many it had no effect (``no_effect``)."""
        rows: dict[str, dict[str, Any]] = {}
        possible: dict[str, int] = {}
        for r in self.points:
            kind = r.get("fault", "crash")
            row = rows.setdefault(kind, {"scenarios": 0, "held": 0, "violated": 0, "wasted": 0, "zombie": 0, "blocked_s": 0.0})
            if kind in MACHINE_KIND_OF:
                row.setdefault("faulted", 0)
                row.setdefault("no_effect", 0)
                row["no_effect" if machine_outcome(r) == "no-effect" else "faulted"] += 1
            row["scenarios"] += 1
            row["held" if r["held"] else "violated"] += 1
            row["wasted"] += r["wasted"]
            row["zombie"] += r.get("zombie", 0)
            row["blocked_s"] += r.get("blocked_s", 0.0)
            if "pairs_possible" in r:
                possible[r["plan"]] = max(possible.get(r["plan"], 0), r["pairs_possible"])
        if "interleave" in rows:
            rows["interleave"]["pairs_possible"] = sum(possible.values())
        rank = {kind: n for n, kind in enumerate(FAULT_ORDER)}
        return dict(sorted(rows.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))

    def killed_lines(self) -> dict[str, set[int]]:
        seen: dict[str, set[int]] = {}
        for r in self.points:
            if r.get("exit") in EXERCISED_EXITS:
                seen.setdefault(r["file"], set()).add(r["line"])
        return seen

    def reachable(self) -> dict[str, set[int]]:
        """The executable lines of the functions reached, less those the engine declares no
        iteration reaches (chaos.core.unreachable)."""
        return {f: set(lines) - declared_unreachable(f).keys() for f, lines in self.executable.items()}

    def coverage(self) -> tuple[int, int, float]:
        """(lines killed at least once, executable lines of the functions reached that an iteration
        can reach, percent)."""
        killed = self.killed_lines()
        reachable = self.reachable()
        total = sum(len(lines) for lines in reachable.values())
        hit = sum(len(lines & killed.get(f, set())) for f, lines in reachable.items())
        return hit, total, (round(100.0 * hit / total, 1) if total else 100.0)

    def modes(self) -> str:
        runs = sorted({(r.get("mode"), r.get("seed")) for r in self.points + self.scenarios + self.baselines if r.get("mode")})
        return ", ".join(f"{mode} mode, seed {seed}" for mode, seed in runs)

    def short(self, path: str) -> str:
        if self.rootdir and path.startswith(self.rootdir + os.sep):
            return os.path.relpath(path, self.rootdir)
        return path


def machine_outcome(record: dict[str, Any]) -> str | None:
    """What a fault of the machine did at its point: a key of :data:`MACHINE_OUTCOMES`, or None
    (not a fault of the machine, or it never reached its point).

    The harness counts the errors the worker's loop reported; a worker that died of the error, or
    read it as something else, reported none, yet the fault plainly showed: its check failed.

    >>> machine_outcome({"fault": "disk-full", "exit": "no-effect", "held": False})
    'unreported'
    """
    if record.get("fault") not in MACHINE_KIND_OF:
        return None
    if record.get("exit") == "faulted":
        return "faulted"
    if record.get("exit") == "no-effect":
        return "no-effect" if record["held"] else "unreported"
    return None


def summarize(records: list[dict[str, Any]], *, rootdir: str = "") -> Summary:
    summary = Summary(rootdir=rootdir)
    for rec in records:
        kind = rec.get("kind")
        if kind == "point":
            summary.points.append(rec)
        elif kind == "scenario":
            summary.scenarios.append(rec)
        elif kind == "baseline":
            summary.baselines.append(rec)
        for path, lines in (rec.get("executable") or {}).items():
            summary.executable.setdefault(path, set()).update(lines)
    return summary


# -- terminal -----------------------------------------------------------------------------------
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


# -- HTML ---------------------------------------------------------------------------------------
REPORT_TITLE = "<title>crashgate crash report"  # how a file this module wrote begins (after its doctype and head)
_HEAD_BYTES = 4096


def check_report_path(path: str) -> None:
    """Refuse, with :class:`ValueError` naming the fix, a report path the run could not write or
    must not overwrite: a folder, a file that is not a crashgate report (a database passed by
    mistake, say), or a place where no file can be created. Checked before the run, not after it."""
    if os.path.isdir(path):
        raise ValueError(f"{path!r} is a folder; pass the path of the report's file, e.g. {os.path.join(path, 'crash-report.html')!r}")
    if os.path.lexists(path):
        head = _head_of_regular_file(path)
        if head and REPORT_TITLE.encode() not in head:  # an empty file (touch) holds nothing to lose
            raise ValueError(f"{path!r} exists and is not a crashgate report; it is left as it is: pass another path for the report")
    directory = os.path.dirname(os.path.abspath(path))
    existing = directory
    while not os.path.isdir(existing):  # the folders that would be created, up to one that exists
        parent = os.path.dirname(existing)
        if parent == existing or os.path.lexists(existing):
            raise ValueError(f"the report's folder {directory!r} cannot be created ({existing!r} is not a folder); pass another path")
        existing = parent
    # A file made and removed at once: the file system says, which a permission check does not
    # (root, /proc). The report is written beside its path and renamed over it, so it is the folder
    # that must take a new file, even where the report exists.
    try:
        tempfile.TemporaryFile(dir=existing).close()
    except OSError as exc:
        raise ValueError(f"no file can be created in {existing!r} ({exc.strerror}); pass another path for the report") from None


def _head_of_regular_file(path: str) -> bytes:
    """The first bytes of the file at ``path``, refused (:class:`ValueError`) unless it is a regular file.

    Opened without blocking and checked on the open file: reading a FIFO waited for a writer, so
    ``--chaos-report`` naming one hung pytest before any test; a device or a socket is no report
    either, and a link to nothing would be replaced rather than followed.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        what = "is a link to nothing" if exc.errno == errno.ENOENT else f"cannot be read ({exc.strerror})"
        raise ValueError(f"{path!r} {what}; pass another path for the report") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ValueError(f"{path!r} is {_file_kind(mode)}, not a regular file: the report is a file the run writes; "
                             "pass the path of a new file or of an earlier report")
        with os.fdopen(os.dup(fd), "rb") as f:
            return f.read(_HEAD_BYTES)
    except OSError as exc:
        raise ValueError(f"{path!r} cannot be read ({exc.strerror}); pass another path for the report") from None
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    """``stat``'s file type in words (a folder is refused before this is asked)."""
    for test, kind in ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a folder")):
        if test(mode):
            return kind
    return "a special file"


def write_html(path: str, summary: Summary) -> None:
    """Write the report to ``path`` whole or not at all: it is written beside it, then renamed over it."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    write_whole(path, render_html(summary).encode("utf-8"))


def e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def render_html(summary: Summary) -> str:
    """The whole self-contained page (inline CSS and a few lines of JavaScript)."""
    s = summary
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
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>crashgate crash report: {len(s.points)} points, {s.violated} violated</title>",
        f"<style>{CSS}</style></head><body>",
        '<header><h1>crashgate crash report</h1>',
        f'<p class="meta">{e(s.modes() or "no crash points")}</p></header>',
        '<section class="cards">',
    ]
    for key, value, label, tone in cards:
        parts.append(f'<div class="card {tone}"><div class="num" id="count-{key}">{e(value)}</div><div class="label">{e(label)}</div></div>')
    parts.append("</section>")
    parts += _faults(s)
    parts += _violations(s)
    parts += _plans(s)
    parts += _sources(s)
    parts.append(f"<script>{JS}</script></body></html>")
    return "\n".join(parts)


def _line_id(file_index: int, line: int) -> str:
    return f"f{file_index}-L{line}"


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


def _violations(s: Summary) -> list[str]:
    """The failures grouped by invariant and cause (as the command line groups them), each with
    its count, the user's line where the ledger knows it, its first point and its replay."""
    failed = s.failed
    if not failed:
        return ['<section id="violations" class="ok"><h2>No violations</h2>',
                "<p>Every crash point, baseline and scenario held.</p></section>"]
    index = {f: i for i, f in enumerate(_file_order(s))}
    ordered = record_findings(failed)
    out = [f'<section id="violations"><h2>{len(failed)} violated, in {plural(len(ordered), "finding")}</h2>'
           '<ol class="violations">']
    for group in ordered:
        r = group.first
        detail = group.example
        where = group.where
        link = ""
        if r["kind"] == "point":
            link = f' <a href="#{_line_id(index[r["file"]], r["line"])}">{e(s.short(r["file"]))}:{r["line"]}</a>'
        baseline = bool(group.baselines)
        marks = ('<span class="tag baseline">without any fault</span> ' if baseline else "") + \
            (f'<span class="tag culprit">at {e(where)}</span> ' if where else "")
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


def _culprits(s: Summary) -> set[str]:
    """The user's lines the failures name (``path:line``: where a paid call or delivery came from)."""
    return {where for r in s.failed for _, detail in r["violations"] if (where := user_line(detail))}


def _is_culprit(culprits: set[str], shown_path: str, number: int) -> bool:
    return any(shown_path.endswith(where.rpartition(":")[0]) and where.endswith(f":{number}") for where in culprits)


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


def _sources(s: Summary) -> list[str]:
    files = _file_order(s)
    if not files:
        return []
    by_line: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in s.points:
        by_line.setdefault((r["file"], r["line"]), []).append(r)
    killed = s.killed_lines()
    out = ['<section id="source"><h2>Traced source</h2>', LEGEND,
           '<p class="controls"><input id="file-filter" type="search" placeholder="filter files" aria-label="filter files"> '
           '<label><input id="hide-held" type="checkbox"> hide held lines</label></p>',
           '<table class="index" id="file-index"><thead><tr><th data-key="file">file</th><th data-key="points">points</th>'
           '<th data-key="violated">violated</th><th data-key="coverage">crash coverage</th></tr></thead><tbody>']
    for i, f in enumerate(files):
        n = sum(len(v) for (ff, _), v in by_line.items() if ff == f)
        bad = sum(1 for (ff, _), v in by_line.items() if ff == f for r in v if not r["held"])
        executable = s.reachable().get(f, set())
        covered = round(100.0 * len(executable & killed.get(f, set())) / len(executable), 1) if executable else 100.0
        mine = "" if _is_library(f) else " mine"
        out.append(f'<tr class="{"bad" if bad else "ok"}{mine}" data-file="{e(s.short(f))}" data-points="{n}" data-violated="{bad}" '
                   f'data-coverage="{covered}"><td><a href="#f{i}">{e(s.short(f))}</a></td><td class="n">{n}</td>'
                   f'<td class="n">{bad}</td><td class="n">{covered}%</td></tr>')
    out.append("</tbody></table>")
    for i, f in enumerate(files):
        out += _file_table(s, i, f, by_line, killed.get(f, set()), {f: n for n, f in enumerate(files)})
    out.append("</section>")
    return out


def _file_table(s: Summary, index: int, path: str, by_line: dict[tuple[str, int], list[dict[str, Any]]], killed: set[int],
                files: dict[str, int]) -> list[str]:
    lines = linecache.getlines(path)
    culprits = _culprits(s)
    executable = s.executable.get(path, set()) | {line for (f, line) in by_line if f == path}
    declared = declared_unreachable(path)  # no iteration reaches them: not shown as missed
    out = [f'<h3 id="f{index}">{e(s.short(path))}</h3>']
    if not lines:
        return out + [f"<p>source not readable: {e(path)}</p>"]
    shown = _shown_lines(executable, len(lines))
    out.append('<table class="code"><colgroup><col class="ln"><col class="badge"><col></colgroup>')
    previous = 0
    for number in shown:
        if number > previous + 1:
            out.append(f'<tr class="fold"><td class="ln"></td><td colspan="2">&#8943; lines {previous + 1}&ndash;{number - 1}</td></tr>')
        previous = number
        text = e(lines[number - 1].rstrip("\n"))
        points = by_line.get((path, number), [])
        row_id = _line_id(index, number)
        if _is_culprit(culprits, s.short(path), number):  # the user's line a finding names, whatever was killed there
            out.append(f'<tr class="culprit" id="{row_id}"><td class="ln">{number}</td><td class="badge">from here</td>'
                       f'<td class="src"><code>{text}</code></td></tr>')
            continue
        if points:
            bad = [r for r in points if not r["held"]]
            tone = "violated" if bad else "held"  # across every fault kind at the line
            badge = f"{len(bad)}/{len(points)} violated" if bad else f"{len(points)} held"
            kinds = _kind_counts(points)
            out.append(
                f'<tr class="{tone}" id="{row_id}"><td class="ln">{number}</td><td class="badge" title="{e(kinds)}">{e(badge)}</td>'
                f'<td class="src"><details><summary><code>{text}</code></summary>{_point_details(s, points, files)}</details></td></tr>'
            )
        else:
            tone = "missed" if number in executable and number not in killed and number not in declared else "plain"
            out.append(f'<tr class="{tone}" id="{row_id}"><td class="ln">{number}</td><td class="badge"></td><td class="src"><code>{text}</code></td></tr>')
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


def _point_details(s: Summary, points: list[dict[str, Any]], files: dict[str, int] | None = None) -> str:
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
            if files is not None and r.get("second_file") in files:
                where = f'<a href="#{_line_id(files[r["second_file"]], r["second_line"])}">{where}</a>'
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


LEGEND = (
    '<p class="legend"><span class="sw plain"></span> not a crash point '
    '<span class="sw held"></span> every point held (crash, pause, interleave, faults of the machine) '
    '<span class="sw violated"></span> a point of some fault kind violated an invariant '
    '<span class="sw missed"></span> executable, but no point killed or froze here. '
    "Click a coloured line for its points.</p>"
)

CSS = """
:root { --good:#1e7e34; --bad:#c62828; --held-bg:#e7f5ea; --held-bar:#34a853; --bad-bg:#fdecea;
  --bad-bar:#d93025; --miss-bg:#fff8e1; --miss-bar:#f2b600; --ink:#1f2328; --muted:#59636e; --line:#d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
  margin: 0 auto; padding: 24px 32px 64px; max-width: 1280px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 2px; } h2 { font-size: 17px; margin: 28px 0 10px; }
h3 { font: 600 14px ui-monospace, SFMono-Regular, Menlo, monospace; margin: 24px 0 6px; }
.meta { color: var(--muted); margin: 0; }
.cards { display: grid; grid-template-columns: repeat(6, 1fr); gap: 12px; margin-top: 18px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px; }
.card .num { font-size: 26px; font-weight: 650; font-variant-numeric: tabular-nums; }
.card .label { color: var(--muted); font-size: 12px; }
.card.good .num { color: var(--good); } .card.bad { border-color: var(--bad); background: var(--bad-bg); }
.card.bad .num { color: var(--bad); }
#violations.ok h2 { color: var(--good); }
ol.violations { padding-left: 22px; } ol.violations li { margin-bottom: 12px; }
code, .code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
code.nodeid { font-weight: 600; } .lesson { color: var(--muted); font-style: italic; margin: 2px 0; }
code.replay { display: block; background: #f6f8fa; border: 1px solid var(--line); border-radius: 6px;
  padding: 4px 8px; margin-top: 4px; white-space: pre-wrap; word-break: break-all; user-select: all; }
table.plans { border-collapse: collapse; width: 100%; }
table.plans th, table.plans td { text-align: left; padding: 6px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
table.plans td.n { text-align: right; font-variant-numeric: tabular-nums; }
table.plans tr.bad td:first-child { border-left: 4px solid var(--bad-bar); }
table.plans tr.good td:first-child { border-left: 4px solid var(--held-bar); }
.legend { color: var(--muted); } .sw { display: inline-block; width: 12px; height: 12px; border-radius: 2px;
  vertical-align: -1px; margin: 0 4px 0 12px; border: 1px solid var(--line); }
.sw.held { background: var(--held-bg); border-left: 3px solid var(--held-bar); }
.sw.violated { background: var(--bad-bg); border-left: 3px solid var(--bad-bar); }
.sw.missed { background: var(--miss-bg); border-left: 3px solid var(--miss-bar); }
nav.files { display: flex; flex-wrap: wrap; gap: 6px; }
nav.files a { font: 12px ui-monospace, monospace; text-decoration: none; color: var(--ink);
  border: 1px solid var(--line); border-radius: 999px; padding: 2px 10px; }
nav.files a span { color: var(--muted); } nav.files a.bad { border-color: var(--bad-bar); background: var(--bad-bg); }
table.code { border-collapse: collapse; width: 100%; table-layout: fixed; border: 1px solid var(--line); }
table.code td { padding: 0 8px; vertical-align: top; }
table.code col.ln { width: 56px; } table.code col.badge { width: 112px; }
table.code td.ln { text-align: right; color: var(--muted); user-select: none;
  font: 12px ui-monospace, monospace; border-right: 1px solid var(--line); }
table.code td.badge { font-size: 11px; color: var(--muted); white-space: nowrap; }
table.code td.src code { white-space: pre-wrap; overflow-wrap: anywhere; }
table.code tr.held td { background: var(--held-bg); } table.code tr.held td.ln { box-shadow: inset 3px 0 var(--held-bar); }
table.code tr.violated td { background: var(--bad-bg); } table.code tr.violated td.ln { box-shadow: inset 3px 0 var(--bad-bar); }
table.code tr.violated td.badge { color: var(--bad); font-weight: 600; }
table.code tr.missed td { background: var(--miss-bg); } table.code tr.missed td.ln { box-shadow: inset 3px 0 var(--miss-bar); }
table.code tr.fold td { color: var(--muted); background: #f6f8fa; font-size: 11px; padding: 1px 8px; }
details > summary { cursor: pointer; list-style: none; } details > summary::-webkit-details-marker { display: none; }
details[open] > summary { font-weight: 600; }
.points { margin: 4px 0 8px; white-space: normal; }
.pt { background: #fff; border: 1px solid var(--line); border-left: 4px solid var(--held-bar); border-radius: 6px;
  padding: 6px 10px; margin: 4px 0; }
.pt.violated { border-left-color: var(--bad-bar); }
.pt .head { display: flex; gap: 8px; align-items: baseline; flex-wrap: wrap; }
.pt .tag { font-size: 11px; font-weight: 700; color: var(--good); } .pt.violated .tag { color: var(--bad); }
.pt .wasted { margin-left: auto; color: var(--muted); font-size: 12px; }
body.hide-held table.code tr.held, body.hide-held table.code tr.plain, body.hide-held table.code tr.fold { display: none; }
table.index th { cursor: pointer; text-align: left; } table.index tr.mine td:first-child { font-weight: 600; }
table.index tr.bad td { color: #b91c1c; } .controls input[type=search] { padding: 2px 6px; }
tr.culprit td { background: #fde68a; } tr.culprit .badge { font-weight: 600; }
.violations .tag.baseline { background: #b91c1c; color: #fff; } .violations .tag.culprit { background: #fde68a; }
.violations .count { color: var(--muted); } .violations .fix { margin-top: 2px; }
.pt .inv { margin-top: 4px; } .pt .why { color: var(--muted); font-size: 12.5px; }
.pt .what { color: var(--muted); font-size: 12.5px; }
.pt .fault { font: 600 11px ui-monospace, monospace; border-radius: 4px; padding: 0 5px; background: #eef1f4; }
.pt .fault.pause-live, .pt .fault.pause-expired { background: #e8eefc; } .pt .fault.interleave { background: #f3e8fc; }
.pt .fault.machine { background: #fdf0dc; }
"""

JS = """
function openTarget() {
  var row = location.hash && document.getElementById(location.hash.slice(1));
  if (!row) return;
  var d = row.querySelector('details'); if (d) d.open = true;
  row.scrollIntoView({block: 'center'});
}
window.addEventListener('hashchange', openTarget); openTarget();
// The index of files: sort by a column (click its header; again to reverse), filter by name.
var index = document.getElementById('file-index');
if (index) {
  index.querySelectorAll('th').forEach(function (th) {
    th.addEventListener('click', function () {
      var key = th.dataset.key, body = index.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      var down = th.dataset.dir !== 'down'; th.dataset.dir = down ? 'down' : 'up';
      rows.sort(function (a, b) {
        var x = a.dataset[key], y = b.dataset[key];
        var c = key === 'file' ? x.localeCompare(y) : parseFloat(x) - parseFloat(y);
        return down ? -c : c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
  document.getElementById('file-filter').addEventListener('input', function (ev) {
    var q = ev.target.value.toLowerCase();
    Array.prototype.forEach.call(index.tBodies[0].rows, function (r) { r.hidden = q && r.dataset.file.toLowerCase().indexOf(q) < 0; });
  });
  document.getElementById('hide-held').addEventListener('change', function (ev) {
    document.body.classList.toggle('hide-held', ev.target.checked);
  });
}
"""
