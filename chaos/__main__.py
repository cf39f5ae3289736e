"""``python -m chaos`` and the ``crashgate`` script: the harness's command line (see ``chaos.cli``)."""

import sys
from typing import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Run as a process's entry point (``argv`` None: ``python -m chaos``, the
    ``crashgate`` script), that process ran no job, so it forks scenarios itself (see
    :mod:`chaos.core.pristine`) instead of starting a pristine server, and its usage lines name it
    as it was started (``crashgate``, ``python -m chaos``); called with arguments from another
    program (a test), it is that program's process, which may have run jobs."""
    from chaos import cli
    from chaos.core import pristine

    if argv is None:
        pristine.declare_pristine()
        return cli.main(None, prog=cli.invoked_as(sys.argv[0]))
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
