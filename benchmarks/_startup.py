"""What the pytest plugin costs a project that does not use it: collecting an empty project.

Every pytest run in an environment where crashgate is installed loads ``chaos.plugin`` (its
``pytest11`` entry point), so the plugin must import nothing heavy until a fault plan, a crashgate
fixture or a ``--chaos-*`` option is used. This measures ``pytest --collect-only`` in an empty
folder with the plugin and with ``-p no:crashgate``, the two taking turns run by run, and reports
the median of the paired ratios: 1.00x means the plugin costs nothing measurable.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ._measure import Row, Sizes, median, temp_dir

__all__ = ["startup_rows"]

PAIRS_PER_RUN = 2  # pairs of (with, without) collections per run of the table
COLLECT_TIMEOUT_S = 120.0
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _collect_s(folder: str, *flags: str) -> float:
    """Wall time of ``python -m pytest --collect-only`` in ``folder`` (exit 5: no tests, as expected)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRASHGATE_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (CHECKOUT, env.get("PYTHONPATH", "")) if p)  # this checkout's plugin
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *flags],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=COLLECT_TIMEOUT_S)
    elapsed = time.perf_counter() - started
    if done.returncode != 5:  # 5: collected nothing, which is what an empty project does
        raise RuntimeError(f"pytest --collect-only {' '.join(flags)} exited {done.returncode}: {done.stderr[-300:]}")
    return elapsed


def startup_rows(sizes: Sizes) -> list[Row]:
    pairs = max(1, sizes.runs * PAIRS_PER_RUN)
    with_plugin, without, ratios = [], [], []
    with temp_dir("crashgate-startup-") as folder:
        for _ in range(pairs):
            a = _collect_s(folder)
            b = _collect_s(folder, "-p", "no:crashgate")
            with_plugin.append(a * 1000.0)
            without.append(b * 1000.0)
            ratios.append(a / b)
    assert len(ratios) == pairs, "a pair of collections is missing"
    note = "pytest --collect-only in an empty folder, interpreter start included"
    return [
        Row("startup.collect.with_plugin", "pytest start-up, empty project, crashgate plugin loaded", median(with_plugin), "ms",
            note=note, runs=with_plugin),
        Row("startup.collect.without_plugin", "pytest start-up, empty project, -p no:crashgate", median(without), "ms",
            note=note, runs=without),
        Row("ratio.startup.plugin", "pytest start-up with the plugin / without", median(ratios), "x",
            note=f"median of {pairs} paired runs; target 1.00 (the plugin imports nothing until used)", runs=ratios),
    ]
