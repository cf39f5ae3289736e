"""A seeded sample of a run's items that keeps every kind of fault in it.

A sample (``--chaos-points N``, ``run_matrix(sample=N)``) is for a quick run, and a quick run that
asked for pauses and interleavings must run some of each: drawn uniformly, the few interleaving
items of a plan (5 of 359, say) were left out of a sample of 25 more often than not, and the run
said nothing. So one item of each kind is drawn first, then the rest uniformly from what is left.

>>> import random
>>> items = ["crash"] * 50 + ["interleave"] * 2
>>> picked = sample_every_kind(items, 3, random.Random(0), kind=str)
>>> sorted({items[k] for k in picked})
['crash', 'interleave']
>>> sample_every_kind(items, 99, random.Random(0), kind=str) == list(range(52))
True
"""

from __future__ import annotations

import random
from typing import Callable, Sequence, TypeVar

__all__ = ["sample_every_kind"]

T = TypeVar("T")


def sample_every_kind(items: Sequence[T], n: int, rng: random.Random, *, kind: Callable[[T], str]) -> list[int]:
    """The indexes of ``n`` of ``items``, in order: one of each kind first (of ``n`` kinds drawn at
    random, if there are more kinds than that), then the rest drawn uniformly; all of them if
    ``n`` is not smaller than their number."""
    if n >= len(items):
        return list(range(len(items)))
    by_kind: dict[str, list[int]] = {}
    for index, item in enumerate(items):
        by_kind.setdefault(kind(item), []).append(index)
    kinds = list(by_kind)
    if n < len(kinds):
        kinds = rng.sample(kinds, n)
    chosen = {rng.choice(by_kind[k]) for k in kinds}
    rest = [index for index in range(len(items)) if index not in chosen]
    chosen.update(rng.sample(rest, n - len(chosen)))
    return sorted(chosen)
