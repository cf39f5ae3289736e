"""The records of a run, summed up for the terminal and the HTML report: the fault kinds in the order
both show them, what each means, and :class:`Summary`, which counts the records by fault kind
and measures crash coverage.

Records are plain dicts, one per crash point, baseline or scripted scenario, written by the pytest
plugin into each test report's ``user_properties``.

>>> summary = summarize([{"kind": "point", "fault": "disk-full", "exit": "faulted", "held": True, "wasted": 0}])
>>> summary.by_fault()["disk-full"]["faulted"]
1
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from chaos.core.unreachable import declared_unreachable

__all__ = [
    "EXERCISED_EXITS", "MACHINE_KIND_OF", "FAULT_ORDER", "FAULT_LABELS", "FAULT_MEANING", "MACHINE_OUTCOMES", "Summary",
    "machine_outcome", "summarize"
]

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

    def sampled(self) -> list[tuple[str, int, int]]:
        """Per plan or crash_matrix test that ran a sample of its points (``--chaos-points N``):
        its name, the points of it that ran here, and how many it had to draw from."""
        possible: dict[str, int] = {}
        ran: dict[str, int] = {}
        for r in self.points:
            ran[r["plan"]] = ran.get(r["plan"], 0) + 1
            if r.get("points_possible"):
                possible[r["plan"]] = max(possible.get(r["plan"], 0), r["points_possible"])
        return [(plan, ran[plan], of) for plan, of in sorted(possible.items())]

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
        """``path`` as a reader wants it: relative to the run's folder where it lies in it, else
        from its package's top (``engine/_worker.py``, not a site-packages path)."""
        if self.rootdir and path.startswith(self.rootdir + os.sep):
            return os.path.relpath(path, self.rootdir)
        return _from_package_top(path)


def _from_package_top(path: str) -> str:
    """``path`` from the folder its top-level package lies in (the folders above it that hold an
    ``__init__.py``), or ``path`` itself outside any package.

    >>> _from_package_top(os.path.join(os.path.dirname(os.path.dirname(__file__)), "plugin.py"))
    'chaos/plugin.py'
    """
    if not os.path.isabs(path):
        return path
    top = os.path.dirname(path)
    while os.path.isfile(os.path.join(top, "__init__.py")) and os.path.dirname(top) != top:
        top = os.path.dirname(top)
    return path if top == os.path.dirname(path) else os.path.relpath(path, top)


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
