"""Findings: the violations of a matrix run grouped by invariant and cause, each with its fix.

One unsafe step can break an invariant at hundreds of points; a person needs it once, with the
count, the user's line, the fix in their own terms and one replay command. A **cause** is a
violation's detail with what changes from point to point taken out (job ids, worker names,
states, numbers in quotes or not), keeping the user's line (``sent from notes.py:23``) and the
state a job was left stuck in (``is still 'extract:done'``: a job stuck after its fetch and one
stuck after its extraction were lost at two places of the engine): two points with one cause
are one finding. A family whose run without any fault already breaks an invariant is one
headline, and its points that fail the same way are counted under it.

The **key** of a finding for a file of known findings (``python -m chaos baseline``) is what
stays the same across commits: family, fault, invariant and cause, never a line number of the
engine.

>>> normalise("job 'doc-1' step 'extract': 3 paid calls, at most 2 allowed (1 interruption(s), paid from notes.py:23)")
"job '…' step '…': N paid calls, at most N allowed (N interruption(s), paid from notes.py:23)"
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from chaos.core.invariants import CAUSE_FIXES, FIXES

__all__ = ["Finding", "Headline", "findings", "headlines", "normalise", "user_line", "known_keys", "KnownKey", "known_json", "read_known",
           "KNOWN_FORMAT", "known_line", "plain", "plural", "fix_for", "group_key", "RecordFinding", "record_findings"]

_ORIGIN = re.compile(r"\b(?:sent|paid|done|raised) from (\S+?:\d+)")
# The state a job was left in (the detail of ``drains``): part of the cause, kept by normalise.
_STUCK = re.compile(r"""\bis still (?:'[^']*'|"[^"]*")""")
_KEPT = re.compile(f"{_ORIGIN.pattern}|{_STUCK.pattern}")  # what normalise keeps of a detail, as it is
KnownKey = tuple[str, str, str, str]  # (family, fault, invariant, cause); fault "" for a baseline
KNOWN_BYTES_MAX = 64 << 20  # a file of known findings is a few KiB; a larger one is the wrong file


def normalise(detail: str) -> str:
    """``detail`` without what varies from point to point: quoted values and numbers, except in
    the user's line and in the state a job was left stuck in.

    >>> normalise("job 'doc-3' is still 'verify:done' after the system drained")
    "job '…' is still 'verify:done' after the system drained"
    """
    kept = [m.group(0) for m in _KEPT.finditer(detail)]
    text = _KEPT.sub("\0", detail)
    text = re.sub(r"'[^']*'", "'…'", text)
    text = re.sub(r'"[^"]*"', '"…"', text)
    text = re.sub(r"\d+(?:\.\d+)?", "N", text)
    for part in kept:
        text = text.replace("\0", part, 1)
    return text


def user_line(detail: str) -> str:
    """The user's ``path:line`` a violation names (where a call or a delivery came from), or ""."""
    found = _ORIGIN.search(detail)
    return found.group(1) if found else ""


def group_key(invariant: str, detail: str) -> tuple[str, str]:
    """What makes two violations one finding: the invariant and the user's line where the detail
    names one (one line of the user's code is one cause, whatever it did at each point: an effect
    sent without its outbox row here, applied twice there), else the detail's cause."""
    where = user_line(detail)
    return (invariant, f"at {where}") if where else (invariant, normalise(detail))


def plain(text: str) -> str:
    """``text`` (a docstring's sentence, say) without reST markup, as a terminal shows it.

    >>> plain('declares ``receiver = "strict"`` (see :func:`chaos.check`)')
    'declares receiver = "strict" (see chaos.check)'
    """
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return re.sub(r"``([^`]+)``|`([^`]+)`", lambda m: m.group(1) or m.group(2), text)


def plural(count: int, word: str, words: str = "") -> str:
    """``count`` and ``word``, in the plural (``words``, else ``word`` + s) unless it is one.

    >>> plural(1, "family", "families"), plural(2, "family", "families"), plural(0, "point")
    ('1 family', '2 families', '0 points')
    """
    return f"{count} {word if count == 1 else (words or word + 's')}"


def fix_for(invariant: str, detail: str) -> str:
    """The fix for the cause a violation's detail names: an invariant with several causes has one
    fix per cause (:data:`chaos.core.invariants.CAUSE_FIXES`), so that the advice shown is the
    one that applies; else the invariant's fix (:data:`chaos.core.invariants.FIXES`), or "".

    >>> fix_for("outbox-at-least-once", "outbox row 'doc-1:email' is marked sent but was never delivered").split(":")[0]
    'a row was marked sent although the receiver never had it'
    """
    for pattern, fix in CAUSE_FIXES.get(invariant, ()):
        if re.search(pattern, detail):
            return fix
    return FIXES.get(invariant, "")


class _Grouped:
    """What a headline and a finding derive from their invariant and example: the fix, the user's line."""

    invariant: str
    example: str

    @property
    def fix(self) -> str:
        return fix_for(self.invariant, self.example)

    @property
    def where(self) -> str:
        return user_line(self.example)


@dataclass
class Headline(_Grouped):
    """One way the runs without any fault fail: the families, and their points that fail alike."""

    invariant: str
    cause: str
    example: str
    families: list[str] = field(default_factory=list)
    points: int = 0  # point scenarios (of any family) that fail the same way


@dataclass
class Finding(_Grouped):
    """One invariant broken for one cause, at ``points`` scenarios."""

    invariant: str
    cause: str
    example: str
    points: int = 0
    families: Counter = field(default_factory=Counter)
    faults: Counter = field(default_factory=Counter)
    first: Any = None  # the PointResult it was first seen at (its replay command, its source line)


def headlines(report: Any) -> list[Headline]:
    """The baselines' violations, grouped by (invariant, cause) across families."""
    groups: dict[tuple[str, str], Headline] = {}
    for family, base in report.baselines.items():
        for v in base.violations:
            key = group_key(v.invariant, v.detail)
            head = groups.setdefault(key, Headline(v.invariant, normalise(v.detail), v.detail))
            if family not in head.families:
                head.families.append(family)
    for result in report.results:
        for key in {group_key(v.invariant, v.detail) for v in result.outcome.violations}:
            head = groups.get(key)
            if head is not None:  # a point of any family that fails the way a baseline does
                head.points += 1
    return list(groups.values())


def findings(report: Any, *, known: Iterable[KnownKey] = ()) -> list[Finding]:
    """The points' violations grouped by (invariant, cause), most points first, leaving out
    those a baseline already fails with (counted in :func:`headlines`) and ``known`` ones."""
    in_baseline = {group_key(v.invariant, v.detail) for base in report.baselines.values() for v in base.violations}
    known = set(known)
    groups: dict[tuple[str, str], Finding] = {}
    for result in report.results:
        counted: set[tuple[str, str]] = set()  # a point that breaks one invariant twice alike is one point of it
        for v in result.outcome.violations:
            cause, key = normalise(v.detail), group_key(v.invariant, v.detail)
            if key in in_baseline or (result.family, result.fault, v.invariant, cause) in known:
                continue
            finding = groups.setdefault(key, Finding(v.invariant, cause, v.detail, first=result))
            if key in counted:
                continue
            counted.add(key)
            finding.points += 1
            finding.families[result.family] += 1
            finding.faults[result.fault] += 1
    return sorted(groups.values(), key=lambda f: (-f.points, f.invariant, f.cause))


def known_keys(report: Any) -> set[KnownKey]:
    """Every (family, fault, invariant, cause) the run found: what a file of known findings holds."""
    keys: set[KnownKey] = set()
    for family, base in report.baselines.items():
        keys |= {(family, "", v.invariant, normalise(v.detail)) for v in base.violations}
    for result in report.results:
        keys |= {(result.family, result.fault, v.invariant, normalise(v.detail)) for v in result.outcome.violations}
    return keys


KNOWN_FORMAT = 1


def known_json(target: str, found: set[KnownKey]) -> dict:
    """The file of known findings ``found`` on ``target``, as :func:`read_known` reads it."""
    return {"crashgate_baseline": KNOWN_FORMAT, "target": target,
            "findings": [{"family": f, "fault": k, "invariant": i, "cause": c} for f, k, i, c in sorted(found)]}


def known_line(key: KnownKey) -> str:
    """One known finding as a person reads it, e.g. in a list of those no longer seen.

    >>> known_line(("sender", "crash", "drains", "job '…' is still 'delivering'"))
    "drains in family 'sender' [crash]: job '…' is still 'delivering'"
    """
    family, fault, invariant, cause = key
    return f"{invariant} in family {family!r}{f' [{fault}]' if fault else ' without any fault'}: {cause}"


def read_known(path: str) -> set[KnownKey]:
    """The findings of a file written by ``python -m chaos baseline``; ValueError names what is wrong."""
    # Only a missing file is one to write; a file that is there and is something else is left alone.
    fix = f"write one with: python -m chaos baseline --target X > {path}"
    other = "it is left as it is: pass the file that python -m chaos baseline wrote"
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"--baseline {path!r} does not exist; {fix}") from None
    except OSError as exc:
        raise ValueError(f"--baseline {path!r}: cannot read it ({exc.strerror}); pass the path of a file of known findings") from None
    if not stat.S_ISREG(info.st_mode) or info.st_size > KNOWN_BYTES_MAX:
        what = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"{info.st_size:,} bytes, more than {KNOWN_BYTES_MAX:,}"
        raise ValueError(f"--baseline {path!r} is {what}; {other}")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except OSError as exc:
        raise ValueError(f"--baseline {path!r}: cannot read it ({exc.strerror}); pass the path of a file of known findings") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"--baseline {path!r} is not JSON ({exc}); {other}") from None
    except RecursionError:
        raise ValueError(f"--baseline {path!r} is nested too deeply to be a file of known findings; {other}") from None
    rows = data.get("findings") if isinstance(data, dict) and data.get("crashgate_baseline") == KNOWN_FORMAT else None
    fields = ("family", "fault", "invariant", "cause")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and all(isinstance(r.get(k), str) for k in fields) for r in rows):
        raise ValueError(f"--baseline {path!r} is not a file of known findings (crashgate_baseline: {KNOWN_FORMAT}, "
                         f"findings: [{{family, fault, invariant, cause}}]); {other}")
    return {(r["family"], r["fault"], r["invariant"], r["cause"]) for r in rows}


@dataclass
class RecordFinding:
    """One finding among the pytest plugin's records (plain dicts, one per point, baseline or
    scenario that did not hold): what they break, for one cause, at how many points, in how many
    families already without any fault, and the first of them (its replay command)."""

    invariant: str
    cause: str
    example: str
    records: list[dict[str, Any]] = field(default_factory=list)

    @property
    def first(self) -> dict[str, Any]:
        """The record whose replay command is shown: a family's run without any fault where one
        fails (no fault to inject, the shortest to replay; a fault plan's baseline item before a
        crash_matrix test, which replays whole), else the first point."""
        bases = [r for r in self.records if r.get("kind") == "baseline"]
        return min(bases, key=lambda r: bool(r.get("matrix"))) if bases else self.records[0]

    @property
    def baselines(self) -> int:
        return sum(1 for r in self.records if r.get("kind") == "baseline")

    @property
    def fix(self) -> str:
        return fix_for(self.invariant, self.example)

    @property
    def where(self) -> str:
        return user_line(self.example)

    def counted(self) -> str:
        """How often it was seen, e.g. ``561 points, 2 families without any fault``."""
        parts = []
        points = sum(1 for r in self.records if r.get("kind") == "point")
        scenarios = len(self.records) - points - self.baselines
        if points:
            parts.append(plural(points, "point"))
        if self.baselines:
            parts.append(plural(self.baselines, "family", "families") + " without any fault")
        if scenarios:
            parts.append(plural(scenarios, "scenario"))
        return ", ".join(parts)

    def lines(self, indent: str = "  ", detail_max: int = 300) -> list[str]:
        """The finding as the terminal shows it: count and what was seen (with the user's line,
        where the detail names it), the fix for this cause and one replay command."""
        detail = self.example if len(self.example) <= detail_max else self.example[: detail_max - 3] + "..."
        out = [f"{indent}{self.invariant} ({self.counted()}): {detail}"]
        if self.where and self.where not in detail:  # cut off with the rest of a long detail
            out.append(f"{indent}  at: {self.where}")
        if self.fix:
            out.append(f"{indent}  fix: {self.fix}")
        out.append(f"{indent}  replay: {self.first.get('replay') or self.first.get('pytest_id') or self.first['nodeid']}")
        return out


def record_findings(failed: Iterable[dict[str, Any]]) -> list[RecordFinding]:
    """Failed records grouped as :func:`findings` groups a matrix's points: by the invariant their
    first violation breaks and its cause (:func:`group_key`), a family that fails without any fault
    and its points that fail alike being one finding; those with a family failing without any
    fault first, then the largest. A record without a violation (an expectation of a plan failed)
    is grouped by its first failure."""
    groups: dict[tuple[str, str], RecordFinding] = {}
    for r in failed:
        invariant, detail = (r["violations"][0] if r["violations"]
                             else ("expectation", r["failures"][0] if r["failures"] else "failed"))
        key = group_key(invariant, detail)
        groups.setdefault(key, RecordFinding(invariant, normalise(detail), detail)).records.append(r)
    return sorted(groups.values(), key=lambda g: (not g.baselines, -len(g.records)))
