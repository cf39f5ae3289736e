"""The work of a crash-matrix run: its items, cut in chunks, run here or in lean worker processes.

An item is ``(fault, family, point index, second point index or -1)``. A process that runs items
is handed a :class:`Share` (the target, the prepared families and the run's settings), cut down to
what its items need, and runs them with :func:`run_chunk` after :func:`adopt`; :func:`execute`
decides where: in this process, or in fresh interpreters (:mod:`chaos.matrix.zygote`) when this
one is heavy, since every scenario forks from the process that runs it.

>>> chunked([("crash", "clean", i, -1) for i in range(3)], 2)
[[('crash', 'clean', 0, -1), ('crash', 'clean', 2, -1)], [('crash', 'clean', 1, -1)]]
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field, replace
from chaos.core.freeze import run_interleaving, run_pause
from chaos.core.kill import run_point
from chaos.core.points import Point
from chaos.core.scenario import PAUSE_KINDS, Family, Outcome
from chaos.core.target import Target
from chaos.hostfaults.faults import KIND_OF, run_machine_fault

__all__ = ["CHUNK_POINTS", "PREPARE", "Share", "Work", "adopt", "chunked", "execute", "run_chunk", "scratch_dir"]

CHUNK_POINTS = 64
# Fork from a lean worker process once the caller is this heavy (and the run is this long).
LEAN_RSS_MB_MAX = 60
LEAN_ITEMS_MIN = 48


Work = tuple[str, str, int, int]  # (fault, family, point index, second point index or -1)


@dataclass
class Share:
    """What a process running work items needs besides the items: the resolved target, the prepared
    families and the run's settings; cut down by :meth:`for_items` to what given items need."""

    adapter: Target
    families: dict[str, Family]
    workdir: str
    seed: int
    mode: str
    deep: bool
    points: dict[tuple[str, int], Point] = field(default_factory=dict)  # (family, point index) -> the point, once cut

    def for_items(self, chunks: list[list[Work]]) -> "Share":
        """This share cut down to what ``chunks`` need, for the process that runs them: the
        families without what only preparing and reporting read (every point, the lines reached,
        the classes: tens of thousands of objects on a full matrix), and only the items' points.
        Every scenario forks from that process, and a fork costs in proportion to its memory."""
        lean = {name: replace(family, points=[], executable={}, between=[], classes=[], crash_classes=[])
                for name, family in self.families.items()}
        needed = {(name, i) for chunk in chunks for _, name, index, second in chunk for i in (index, second) if i >= 0}
        return replace(self, families=lean, points={(name, i): self.families[name].points[i] for name, i in needed})


# The share of the work items this process runs, cut for them (see adopt).
_share: Share | None = None
PREPARE = "prepare"  # what a zygote's input starts with when it is to prepare families (chaos.matrix.zygote)


def run_chunk(items: list[Work]) -> list[tuple[Work, Outcome]]:
    """Run ``items`` with the share :func:`adopt` gave this process, each scenario forked from here."""
    if _share is None:
        raise RuntimeError("run_chunk() runs the work of a matrix: adopt() its share first")
    adapter, families, points, seed, mode, deep = _share.adapter, _share.families, _share.points, _share.seed, _share.mode, _share.deep
    out = []
    scratch = tempfile.mkdtemp(dir=_share.workdir)
    for item in items:
        fault, name, index, second = item
        family: Family = families[name]
        point = points[(name, index)]
        if fault == "crash":
            outcome = run_point(adapter, family, point, scratch, seed=seed, mode=mode, deep=deep)
        elif fault in PAUSE_KINDS:
            outcome = run_pause(adapter, family, point, scratch, seed=seed, expired=fault == PAUSE_KINDS[1], deep=deep)
        elif fault in KIND_OF:
            outcome = run_machine_fault(adapter, family, point, scratch, seed=seed, fault=fault, deep=deep)
        else:
            outcome = run_interleaving(adapter, family, point, points[(name, second)], scratch, seed=seed, deep=deep)
        out.append((item, outcome))
    return out


def chunked(work: list[Work], jobs: int) -> list[list[Work]]:
    """``work`` in chunks of at most about :data:`CHUNK_POINTS`, a multiple of ``jobs`` of them,
    each taking every n-th item: each worker process gets as many points of every family (a
    family whose points wait on a held lock, or run a whole retry storm, is shared too)."""
    count = max(1, jobs) * max(1, -(-len(work) // (CHUNK_POINTS * max(1, jobs))))
    return [chunk for chunk in (work[i::count] for i in range(count)) if chunk]


def execute(share: Share, chunks: list[list[Work]], jobs: int) -> list[tuple[Work, Outcome]]:
    """Run the chunks, in lean worker processes when that pays (see :mod:`chaos.matrix.zygote`).

    Adapters that cannot be pickled (a closure, an open connection) run here instead, forking
    from this process.
    """
    items = sum(len(chunk) for chunk in chunks)
    lean = jobs > 1 or (items >= LEAN_ITEMS_MIN and _rss_mb() > LEAN_RSS_MB_MAX)
    if lean:
        try:
            payload = pickle.dumps(share.for_items([]))
        except Exception:  # not picklable: fork from here
            lean = False
    if not lean:
        adopt(share.for_items(chunks))
        return [item for chunk in chunks for item in run_chunk(chunk)]
    del payload
    workers = max(1, min(jobs, len(chunks)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    procs = []
    for n in range(workers):
        source = os.path.join(share.workdir, f"zygote-{n}.in")
        target = os.path.join(share.workdir, f"zygote-{n}.out")
        mine = chunks[n::workers]
        with open(source, "wb") as f:
            pickle.dump((share.for_items(mine), mine), f)
        procs.append((subprocess.Popen([sys.executable, "-m", "chaos.matrix.zygote", source, target], env=env), target))
    done: list[tuple[Work, Outcome]] = []
    for proc, target in procs:
        if proc.wait() != 0:
            raise RuntimeError(f"a matrix worker process exited with status {proc.returncode}; its error is printed above")
        with open(target, "rb") as f:
            done.extend(pickle.load(f))
    return done


def adopt(share: Share) -> None:
    """Make ``share`` the one this process's :func:`run_chunk` runs items with."""
    global _share
    _share = share


def _rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def scratch_dir() -> str:
    """A fresh directory for scenario databases: on tmpfs (/dev/shm) when there is one.

    A process crash leaves a file in the same state on any file system (the page cache survives
    the process), so tmpfs changes nothing that fork mode simulates, and spares every scenario
    the fsyncs of a checkpoint. ``CRASHGATE_WORKDIR`` overrides the location.
    """
    base = os.environ.get("CRASHGATE_WORKDIR") or ("/dev/shm" if os.access("/dev/shm", os.W_OK) else None)
    return tempfile.mkdtemp(prefix="crashgate-", dir=base)
