"""Render the rows: one plain-text table, or one JSON object with a key per row.

>>> from ._measure import Row
>>> print(render_table([Row("a.b", "a figure", 1500.0, "jobs/s")], {"cpus": 2}, []))
crashgate benchmarks: cpus=2
benchmark  value  unit    us/step  commits/job  note
---------  -----  ------  -------  -----------  ----
a figure   1,500  jobs/s
>>> to_json([Row("a.b", "a figure", 1500.0, "jobs/s")], {"cpus": 2}, [])["a.b"]["value"]
1500.0
"""

from __future__ import annotations

from typing import Any

from ._measure import Row

__all__ = ["render_table", "to_json", "describe"]

HEADER = ["benchmark", "value", "unit", "us/step", "commits/job", "note"]


def render_table(rows: list[Row], meta: dict[str, Any], messages: list[str]) -> str:
    cells = [row.cells() for row in rows]
    widths = [max(len(line[i]) for line in [HEADER] + cells) for i in range(len(HEADER))]
    lines = ["crashgate benchmarks: " + describe(meta)]
    lines.append(_line(HEADER, widths))
    lines.append(_line(["-" * w for w in widths], widths))
    lines += [_line(line, widths) for line in cells]
    lines += messages
    return "\n".join(lines)


def describe(meta: dict[str, Any]) -> str:
    """One line naming the machine and the method, from :func:`benchmarks._measure.machine`."""
    known = ("system", "machine", "cpus", "python", "sqlite", "runs")
    if not all(k in meta for k in known):
        return ", ".join(f"{k}={v}" for k, v in meta.items())
    text = (
        f"{meta['system']} {meta['machine']}, {meta['cpus']} CPUs, Python {meta['python']}, SQLite {meta['sqlite']}; "
        f"each figure the median of {meta['runs']} run{'s' if meta['runs'] != 1 else ''}"
    )
    return text + (" (--quick: sizes too small to quote)" if meta.get("quick") else "")


def to_json(rows: list[Row], meta: dict[str, Any], messages: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"meta": meta}
    for row in rows:
        out[row.key] = row.to_json()
    if messages:
        out["messages"] = messages
    return out


def _line(cells: list[str], widths: list[int]) -> str:
    parts = [c.rjust(w) if i in (1, 3, 4) and c else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))]
    return "  ".join(parts).rstrip()
