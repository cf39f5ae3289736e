"""Which items of a crash matrix run, and which share the outcome of one that ran.

A point whose pause (or crash) class already ran shares its first point's outcome
(:func:`firsts`); a crash that leaves exactly what a crash of another family leaves, recovered
alike, shares that one's outcome, compared with its own family's baseline (:func:`across_families`,
:func:`shared_across`); an interleaving runs a seeded sample of the pairs that can differ
(:func:`interleave_pairs`).

>>> members = {}
>>> firsts("clean", "pause", [0, 1, 2, 3], [0, 0, 2, 2], members)
[0, 2]
>>> members
{('pause', 'clean', 0): [1], ('pause', 'clean', 2): [3]}
"""

from __future__ import annotations

import random
from typing import Any, Iterable

from chaos.core.process import Exit
from chaos.core.scenario import Family, Outcome
from chaos.core.settle import recovery_key
from chaos.core.target import Target
from chaos.core.verdict import compared
from chaos.matrix.report import source_line
from chaos.matrix.work import Share, Work, execute

__all__ = ["across_families", "firsts", "interleave_pairs", "shared_across", "shared_outcome"]


def firsts(family: str, kind: str, singles: list[int], classes: list[int],
           members: dict[tuple[str, str, int], list[int]]) -> list[int]:
    """The points to run: the first of each class among ``singles`` (every one without classes);
    the others are noted in ``members`` to share their first point's outcome."""
    if not classes:
        return singles
    for i in singles:
        if classes[i] != i:
            members.setdefault((kind, family, classes[i]), []).append(i)
    return sorted({classes[i] for i in singles})


def interleave_pairs(family: Family, only: str | None, budget: int, rng: random.Random,
           firsts: Iterable[int] | None = None) -> tuple[list[tuple[int, int]], int]:
    """Which (p, q) pairs of a family to interleave, and how many exist.

    Two workers share nothing but the database, and a transaction is atomic to the other, so
    freezing one anywhere between two of its transactions is, to the other, the same as freezing
    it just before the next statement: the candidates are the points just before a statement
    reaches the database while the worker holds no open transaction. Every candidate p gets an
    equal share of the ``budget`` of q's (a seeded sample), so no p is left out. ``firsts``
    restricts p (a fault plan's ``steps``); q is any candidate, as the second worker starts afresh.
    """
    if family.scenario.phase != "worker":
        # B is a worker: its freeze points come from the family's recording only when A runs the
        # same iteration (a frozen sender or person is covered by the pause matrix instead).
        return [], 0
    between = family.between or [True] * len(family.points)
    seconds = [
        i for i, p in enumerate(family.points) if between[i] and ".execute(" in source_line(p.file, p.line)
    ]
    allowed = set(firsts) if firsts is not None else None
    candidates = seconds if allowed is None else [i for i in seconds if i in allowed]
    if only:
        first, _, second = only.partition("+")
        ids = {p.id: i for i, p in enumerate(family.points)}
        if first in ids and second in ids:
            return [(ids[first], ids[second])], len(candidates) * len(seconds)
        return [], len(candidates) * len(seconds)
    possible = len(candidates) * len(seconds)
    if possible <= budget:
        return [(i, j) for i in candidates for j in seconds], possible
    per_point = max(1, budget // max(1, len(candidates)))
    chosen = [(i, j) for i in candidates for j in rng.sample(seconds, min(per_point, len(seconds)))]
    return chosen[:budget] if len(chosen) > budget else chosen, possible


def across_families(work: list[Work], families: dict[str, Family]) -> dict[Work, Work]:
    """The crash items whose kill leaves exactly what an earlier item's kill in another family
    leaves (the files' content and the clock, see :class:`chaos.core.points.DurableState`), to be
    recovered alike (:func:`chaos.core.settle.recovery_key`): each -> the item that runs for it.
    Families prepared alike (the same template, the same clock) share the points before their
    own fault first shows."""
    first: dict[Any, Work] = {}
    across: dict[Work, Work] = {}
    for item in work:
        fault, name, index, _ = item
        content = families[name].crash_contents.get(index) if fault == "crash" else None
        if content is None:
            continue
        key = (content, recovery_key(families[name]))
        if key in first:
            across[item] = first[key]
        else:
            first[key] = item
    return across


def shared_across(share: Share, across: dict[Work, Work], done: dict[Work, Outcome],
                  adapter: Target) -> tuple[list[tuple[Work, Outcome]], dict[Work, str]]:
    """The outcomes of the items of ``across``, and the id of the point that ran for each: its
    runner's outcome, compared with its own family's baseline; an item whose runner was not killed
    at its point (it raised first, say) is run after all."""
    out: list[tuple[Work, Outcome]] = []
    ran_for: dict[Work, str] = {}
    again: list[Work] = []
    for item, ran in across.items():
        outcome = done[ran]
        if outcome.exit != Exit.KILLED:
            again.append(item)
            continue
        family = share.families[item[1]]
        shared = shared_outcome(outcome, family.points[item[2]].id)
        shared.violations = [v for v in outcome.violations if v.invariant != "same-outcome"] + compared(family, shared, adapter)
        out.append((item, shared))
        ran_for[item] = f"{ran[1]}::{share.families[ran[1]].points[ran[2]].id}"
    if again:
        out += execute(share, [again], 1)
    return out, ran_for


def shared_outcome(outcome: Outcome, point_id: str) -> Outcome:
    """The outcome of a class's first point, as another point of the class reports it: a shallow
    copy, as :func:`dataclasses.replace` makes, without running ``__init__`` for each of thousands."""
    shared = object.__new__(Outcome)
    shared.__dict__.update(outcome.__dict__, point=point_id, seconds=0.0)
    return shared
