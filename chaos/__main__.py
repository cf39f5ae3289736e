"""``python -m chaos``: the harness's command line (see ``chaos.cli``)."""

import sys

from chaos.cli import main

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
