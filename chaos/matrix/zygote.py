"""A lean process to fork scenarios from: ``python -m chaos.matrix.zygote IN OUT``.

Every scenario forks, and a fork (with the SIGKILL that ends it) costs in proportion to the
memory of the process forked: measured here, about 6 ms from a bare interpreter against 26 ms from
one holding 150 MB. A pytest process is heavy, so the matrix hands its work to fresh interpreters
that import only the harness and the adapter's module. Input and output are pickles in files.
"""

from __future__ import annotations

__all__ = ["main"]

import pickle
import sys

from chaos.matrix.runner import adopt, run_chunk


def main(argv: list[str]) -> int:
    source, target = argv
    with open(source, "rb") as f:
        shared, chunks = pickle.load(f)
    adopt(*shared)
    results = [item for chunk in chunks for item in run_chunk(chunk)]
    with open(target, "wb") as f:
        pickle.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
