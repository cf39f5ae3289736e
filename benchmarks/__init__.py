"""Benchmarks: the engine against SQLite's own limit and against its peers, side by side.

``python -m benchmarks`` prints one table; every figure is the median of several runs and every
comparison is a ratio of two medians measured in the same invocation. ``--json`` prints the same
figures as one JSON object; ``--quick`` runs tiny sizes once (the CI smoke run).

>>> from benchmarks import Sizes, collect
>>> report = collect(Sizes.for_mode(quick=True), peers=False, progress=lambda line: None)  # doctest: +SKIP
"""

from ._harness import harness_rows
from ._measure import Row, Sizes
from ._run import Report, collect

__all__ = ["Report", "Row", "Sizes", "collect", "harness_rows"]
