"""A lean process to fork scenarios from: ``python -m chaos.matrix.zygote IN OUT``.

Every scenario forks, and a fork (with the SIGKILL that ends it) costs in proportion to the
memory of the process forked: measured here, about 6 ms from a bare interpreter against 26 ms from
one holding 150 MB. A pytest process is heavy, so the matrix hands its work to fresh interpreters
that import only the harness and the adapter's module. Input and output are pickles in files.

IN holds ``(share, chunks)`` (a :class:`chaos.matrix.work.Share`): run the chunks' points, answer
their outcomes. A family whose
doomed iteration meets an I/O error (libfiu, :mod:`chaos.core.libfiu`) is also prepared in such a
process, started by ``fiu-run``: IN then holds ``(PREPARE, (adapter, scenarios, workdir, seed,
deep, timeout_s))``, and OUT the prepared families.
"""

from __future__ import annotations

__all__ = ["main"]

import os
import pickle
import signal
import sys


def main(argv: list[str]) -> int:
    # Imported here, not at the top, so that a Ctrl-C while they load (this process has started
    # nothing yet) ends it at once and quietly (see the end of this file); from here on a Ctrl-C is
    # a KeyboardInterrupt, which leaves a scenario through its cleanup (its children killed).
    from chaos.core.points import warm
    from chaos.core.prepare import prepare
    from chaos.matrix.work import PREPARE, adopt, run_chunk

    signal.signal(signal.SIGINT, signal.default_int_handler)
    source, target = argv
    with open(source, "rb") as f:
        first, rest = pickle.load(f)
    if first == PREPARE:
        adapter, scenarios, workdir, seed, deep, timeout_s = rest
        warm(adapter.trace_paths())  # parsed once here, not again in every family's recording child
        results: list = [prepare(adapter, scenario, workdir, seed=seed, deep=deep, timeout_s=timeout_s) for scenario in scenarios]
    else:
        adopt(first)
        results = [item for chunk in rest for item in run_chunk(chunk)]
    with open(target, "wb") as f:
        pickle.dump(results, f)
    return 0


def _quit_while_loading(signum: int, frame: object) -> None:
    os._exit(130)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, _quit_while_loading)
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the parent says it, once
        sys.exit(130)
