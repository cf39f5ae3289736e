"""``python -m chaos`` and the ``crashgate`` script: the harness's command line (see ``chaos.cli``)."""

import sys
from typing import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """The command line, in a process of its own: it ran no job, so it forks scenarios itself
    (see :mod:`chaos.core.pristine`) instead of starting a pristine server."""
    from chaos import cli
    from chaos.core import pristine

    pristine.declare_pristine()
    return cli.main(argv)


if __name__ == "__main__":
    sys.exit(main())
