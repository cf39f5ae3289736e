"""libfiu's POSIX preload: the real mechanism behind every I/O error the harness brings on.

A process started by ``fiu-run -x`` calls the C library through libfiu's wrappers; enabling a
failure point (``posix/io/rw/pwrite``, say) then makes that call fail, in that process only, with
the errno given, until it is disabled. SQLite meets the error where it would meet a failing disk:
a COMMIT that cannot write its WAL frames answers ``SQLITE_IOERR_WRITE``.

Two users share it: the ``io`` faults of the host (:mod:`chaos.hostfaults`), which inject the
failure into a frozen worker and let it run on, and the crash matrix's I/O families
(``io_error`` and ``io_read_error`` store faults, :mod:`chaos.core.store_faults`), whose doomed
iteration meets the failure during a call and is then killed at every line of the error path.
Either way the worker must descend from a process started under ``fiu-run``:
:func:`run_under_fiu` starts one.
"""

from __future__ import annotations

import ctypes
import os
import pickle
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["MISSING", "PRELOAD", "UnderFiu", "missing", "preloaded", "enable", "run_under_fiu"]

LIBFIU = "libfiu.so.0"
PRELOAD = "fiu_posix_preload"  # what LD_PRELOAD holds in a process started by fiu-run
MISSING = (
    "the io faults need libfiu's POSIX preload and its tools fiu-run and fiu-ctrl, which are not "
    "installed; install them (Debian/Ubuntu: apt-get install fiu-utils) or leave out the io fault kind"
)


def missing() -> str | None:
    """Why I/O faults cannot run here (what to install), or None if libfiu's tools are installed."""
    if shutil.which("fiu-run") and shutil.which("fiu-ctrl"):
        return None
    return MISSING


def preloaded() -> bool:
    """Whether this process was started by ``fiu-run -x`` (or descends from one that was)."""
    return PRELOAD in os.environ.get("LD_PRELOAD", "")


def enable(failures: Iterable[tuple[str, int]], what: str) -> Callable[[], None]:
    """Make these calls of this process fail from now on (libfiu failure point, errno), and return
    what disables them again. ``what`` names the fault in the error a process not started by
    ``fiu-run -x`` gets."""
    if not preloaded():
        raise RuntimeError(f"the {what} fault runs only in a process started by fiu-run -x (see chaos.core.libfiu.run_under_fiu)")
    lib = ctypes.CDLL(LIBFIU)
    names = []
    for name, code in failures:
        if lib.fiu_enable(name.encode(), 1, ctypes.c_void_p(code), 0) != 0:
            raise RuntimeError(f"libfiu refused to enable {name}")
        names.append(name)

    def disable() -> None:
        for name in names:
            lib.fiu_disable(name.encode())

    return disable


class UnderFiu:
    """``python -m module IN OUT`` in a process started by ``fiu-run -x``, running meanwhile:
    ``request`` pickled to IN, the answer unpickled from OUT by :meth:`result` (files named after
    ``tag`` under ``workdir``, with libfiu's control fifos, which ``fiu-ctrl`` uses to lift a
    failure from outside)."""

    def __init__(self, module: str, request: Any, workdir: str, tag: str) -> None:
        reason = missing()
        if reason:
            raise ValueError(reason)
        source, self.target = os.path.join(workdir, f"{tag}.in"), os.path.join(workdir, f"{tag}.out")
        try:
            payload = pickle.dumps(request)
        except Exception as exc:
            raise ValueError(f"the io faults run the adapter in a separate process, and it cannot be pickled ({exc})") from exc
        with open(source, "wb") as f:
            f.write(payload)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        command = ["fiu-run", "-x", "-f", os.path.join(workdir, f"{tag}-ctrl"), sys.executable, "-m", module, source, self.target]
        self.process = subprocess.Popen(command, env=env)

    def result(self) -> Any:
        if self.process.wait() != 0:
            raise RuntimeError("the matrix process started under fiu-run failed; its error is printed above")
        with open(self.target, "rb") as f:
            return pickle.load(f)


def run_under_fiu(module: str, request: Any, workdir: str, tag: str) -> Any:
    """The answer of an :class:`UnderFiu` process, waited for."""
    return UnderFiu(module, request, workdir, tag).result()
