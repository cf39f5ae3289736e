"""``python -m benchmarks [--quick] [--json] [--runs N] [--no-peers]``: see the package docstring."""

from __future__ import annotations

import argparse
import json
import sys

from ._measure import Sizes, machine
from ._run import collect
from ._table import render_table, to_json

HELP_QUICK = "tiny sizes, one run: a smoke test of every benchmark (CI), not figures to quote"
HELP_JSON = "print one JSON object (a key per row, the table's units, ratios included) instead of the table"
HELP_RUNS = "runs per figure (median taken); default 5, or 1 with --quick"
HELP_NO_PEERS = "skip the peer libraries (DBOS, huey, persist-queue, litequeue)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help=HELP_QUICK)
    parser.add_argument("--json", action="store_true", help=HELP_JSON)
    parser.add_argument("--runs", type=int, default=None, help=HELP_RUNS)
    parser.add_argument("--no-peers", action="store_true", help=HELP_NO_PEERS)
    args = parser.parse_args(argv)
    if args.runs is not None and not 1 <= args.runs <= 99:
        parser.error(f"--runs {args.runs}: pass a number of runs from 1 to 99")
    sizes = Sizes.for_mode(args.quick, args.runs)
    report = collect(sizes, peers=not args.no_peers)
    meta = {**machine(), "runs": sizes.runs, "quick": sizes.quick}
    if args.json:
        for message in report.messages:
            print(message, file=sys.stderr)
        print(json.dumps(to_json(report.rows, meta, report.messages), indent=1))
    else:
        print(render_table(report.rows, meta, report.messages))
    return 0


if __name__ == "__main__":
    sys.exit(main())
