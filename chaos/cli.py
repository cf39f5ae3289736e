"""``python -m chaos``: the harness's command line, a thin layer over the library.

``matrix`` kills a worker at every crash point and checks the invariants; it exits 1 on any
violation, printing for each the invariant, what was seen, and the one command that replays it.
``explore`` runs random histories (chaos.machine) and exits 1 with the shrunk program of every distinct
violation (``--ignore INVARIANT`` looks past a known one).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from typing import Sequence

from engine.arguments import OneLineParser, non_negative_int, positive_int
from engine.terminal import printable, stdout_closed

from chaos.adapter import REFERENCE_TARGET
from chaos.matrix.runner import DEFAULT_FAULTS, DEFAULT_SEED, FAULTS, PAIRS_DEFAULT, MatrixReport, run_matrix
from chaos.core.scenario import MODES

__all__ = ["main", "COMMANDS", "format_report"]

POSTGRES_TARGET = "chaos:postgres_adapter"
COMMANDS = ("matrix", "explore", "adapter", "demo", "soak", "plans")
SOURCE_CHARS_MAX = 60


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="python -m chaos", description="Crash-test a durable workflow engine.")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("matrix", help="kill a worker at every crash point and check the invariants")
    m.add_argument("--target", default=REFERENCE_TARGET, help=f"adapter as MODULE:ATTR (default {REFERENCE_TARGET})")
    m.add_argument("--mode", choices=MODES, default="fork", help="fork: real SIGKILL in a child (default); inprocess: faster, weaker")
    m.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of every RNG in the run (default 0)")
    m.add_argument("--point", help="run one scenario, as printed in a replay command: FAMILY::POINT")
    m.add_argument("--sample", type=positive_int, help="run a seeded sample of N points instead of all (N >= 1)")
    m.add_argument("--family", action="append", help="run only this scenario family (repeatable)")
    m.add_argument("--shallow", action="store_true", help="only the target functions' own lines, not what they call")
    m.add_argument("-n", "--jobs", type=_jobs, default=os.cpu_count() or 1,
                   help="processes to spread points over: a number or 'auto' (default: every core, here %(default)s)")
    m.add_argument(
        "--faults",
        default=",".join(DEFAULT_FAULTS),
        help=f"comma-separated fault kinds from {', '.join(FAULTS)} (default {','.join(DEFAULT_FAULTS)})",
    )
    m.add_argument("--pairs", type=non_negative_int, default=PAIRS_DEFAULT, help=f"interleaving pairs to run, a seeded sample (default {PAIRS_DEFAULT})")
    m.add_argument("--json", action="store_true", help="print a JSON summary instead of the table")
    m.add_argument("--exhaustive", action="store_true",
                   help="pause at every point, not once per pause class (points with no visible operation between them)")
    m.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite",
                   help="postgresql: scenario databases on a PostgreSQL server (--db, or a throwaway local one)")
    m.add_argument("--db", help="postgresql://... URL of a server whose user may create databases (implies --backend postgresql)")
    m.add_argument("--verbose", action="store_true", help="print a line per point before the findings and the summary")
    m.add_argument("--quiet", action="store_true", help="print only findings and the summary (the default; kept for old scripts)")
    # Random histories (chaos.machine, which imports Hypothesis only when the command runs).
    e = sub.add_parser("explore", help="random histories of runs, kills, clock jumps and faults; a failure is shrunk and replayable")
    e.add_argument("--target", default=REFERENCE_TARGET, help=f"adapter as MODULE:ATTR (default {REFERENCE_TARGET})")
    e.add_argument("--profile", choices=("ci", "nightly"), default="ci", help="ci: about 4,000 steps, seed 0 (default); nightly: 125,000 steps")
    e.add_argument("--seed", type=int, help="seed of the exploration (default: 0 for ci, a fresh one for nightly; printed either way)")
    e.add_argument("--max-examples", type=positive_int, help="explore at most this many histories (default: the profile's)")
    e.add_argument("--ignore", action="append", default=[], metavar="INVARIANT",
                   help="count this invariant's violations, but do not fail on them: look past a known weakness for other bugs (repeatable)")
    a = sub.add_parser("adapter", help="which optional capabilities an adapter offers, and what each missing one disables")
    a.add_argument("--target", default=REFERENCE_TARGET, help=f"adapter as MODULE:ATTR (default {REFERENCE_TARGET})")
    from chaos.fleet import demo as _demo
    from chaos.fleet import soak as _soak  # the fleet commands: workers, sender and monkey as real processes

    _demo.add_arguments(sub.add_parser("demo", help="workers SIGKILLed at random while documents go through; nothing lost",
                                       description=_demo.DESCRIPTION))
    _soak.add_arguments(sub.add_parser("soak", help="a long kill-and-restart run on sqlite or postgresql, then every invariant",
                                       description=_soak.DESCRIPTION))
    from chaos.plans import files as plan_files  # `plans init`: copy the shipped fault plans into a project

    plan_files.add_arguments(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _command(args)
    except BrokenPipeError:  # the reader (e.g. `| head`) stopped reading: not an error
        return stdout_closed()


def _command(args: argparse.Namespace) -> int:
    if args.command in ("demo", "soak"):
        from chaos.fleet import demo as _demo
        from chaos.fleet import soak as _soak

        return _demo.run_demo(args) if args.command == "demo" else _soak.run_soak(args)
    if args.command == "explore":
        from chaos import machine

        return machine.run_cli(args)
    if args.command == "matrix":
        return _matrix(args)
    if args.command == "adapter":
        return _adapter(args)
    if args.command == "plans":
        from chaos.plans import files

        return files.run(args)
    return 2


def _disabled_by_missing_capabilities(target: str) -> list[str]:
    """One line per optional capability the target lacks that switches a fault or check off."""
    from chaos.adapter import load_adapter
    from chaos.core.capabilities import capability_report

    return [f"capability missing:{line[6:]}" for line in capability_report(load_adapter(target), missing_only=True)
            if "this disables" in line or "error:" in line]


def _adapter(args: argparse.Namespace) -> int:
    from chaos.adapter import load_adapter
    from chaos.core.capabilities import capability_report

    try:
        adapter = load_adapter(args.target)
    except ValueError as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)
        return 2
    print(f"{args.target}: the required protocol is there (chaos.adapter.Adapter); optional capabilities:")
    for line in capability_report(adapter):
        print(line)
    return 0


def _matrix(args: argparse.Namespace) -> int:
    import contextlib

    postgresql = args.backend == "postgresql" or args.db is not None
    target = POSTGRES_TARGET if postgresql and args.target == REFERENCE_TARGET else args.target
    with contextlib.ExitStack() as stack:
        db, replay_db = args.db, None
        if postgresql and db is None:  # a throwaway local server, removed afterwards, as the soak does
            from engine.pgserver import ServerUnavailable, TemporaryPostgres

            try:
                server = stack.enter_context(TemporaryPostgres())
            except ServerUnavailable as exc:
                print(f"error: cannot start a throwaway PostgreSQL server: {exc}; or pass --db postgresql://...", file=sys.stderr)
                return 2
            db, replay_db = server.url(), ("--backend", "postgresql")
        try:
            report = run_matrix(
                target,
                mode=args.mode,
                seed=args.seed,
                deep=not args.shallow,
                families=args.family,
                point=args.point,
                sample=args.sample,
                jobs=args.jobs,
                faults=[f.strip() for f in args.faults.split(",") if f.strip()],
                pairs=args.pairs,
                db=db,
                replay_db=replay_db,
                exhaustive=args.exhaustive,
            )
        except ValueError as exc:
            print(f"error: {printable(exc)}", file=sys.stderr)
            return 2
    try:
        if args.json:
            print(json.dumps(report.to_json(), indent=2))
        else:
            for line in _disabled_by_missing_capabilities(target):
                print(line)
            print(format_report(report, verbose=args.verbose and not args.quiet))
    except BrokenPipeError:  # the reader (e.g. `| head`) stopped reading: the verdict still stands
        stdout_closed()
    return 1 if report.violations else 0


def _jobs(text: str) -> int:
    """An argparse type: a number of processes (at least 1), or ``auto`` for every core."""
    return (os.cpu_count() or 1) if text == "auto" else positive_int(text)


def format_report(report: MatrixReport, *, verbose: bool = False) -> str:
    """The matrix as a person reads it: the families that fail without any fault first, then the
    findings, coverage and a summary (``verbose``: a row per point before them)."""
    out: list[str] = []
    for name, base in report.baselines.items():
        for v in base.violations:
            out.append(f"FAILS WITHOUT ANY FAULT: family {name!r}: {v.detail}" if v.invariant == "baseline"
                       else f"VIOLATION {v.invariant} in family {name!r} without any crash: {v.detail}")
            out.append(f"  lesson: {report.lessons[name]}")
    for name, reason in report.skipped.items():
        out.append(f"skipped: family {name!r}: {reason}")
    if verbose:
        out.append(f"{'fault':<14} {'point':<52} {'source':<{SOURCE_CHARS_MAX}} {'outcome':<11} wasted")
        for r in report.results:
            outcome = "held" if r.outcome.held else "VIOLATED"
            if r.outcome.held and r.outcome.exit not in ("killed", "paused", "interleaved", "faulted"):
                outcome = r.outcome.exit
            out.append(f"{r.fault:<14} {r.id:<52} {r.source[:SOURCE_CHARS_MAX]:<{SOURCE_CHARS_MAX}} {outcome:<11} {r.outcome.wasted_calls}")
        out.append("")
    alike = Counter((r.same_as, r.fault) for r in report.results if r.same_as)
    for r in report.results:
        if r.same_as:  # reported once, at the point its class ran at
            continue
        for v in r.outcome.violations:
            out.append(f"VIOLATION {v.invariant} at {r.id} [{r.fault}] ({_short(r.point.file)}:{r.point.line}: {r.source})")
            out.append(f"  seen: {v.detail}")
            if alike[(r.id, r.fault)]:
                what = "crash class (no durable change between them)" if r.fault == "crash" else "pause class (no visible operation between them)"
                out.append(f"  also at the {alike[(r.id, r.fault)]} later points of its {what}")
            out.append(f"  lesson: {report.lessons[r.family]}")
            out.append(f"  replay: {r.replay}")
    cov = report.coverage()
    out.append(f"crash coverage: {cov['exercised']}/{cov['lines']} executable lines of the functions reached ({cov['percent']}%)")
    for path, lines in cov["missed"].items():
        out.append(f"  not reached by any scenario: {path}: {_ranges(lines)}")
    for kind, row in report.by_fault().items():
        per = "crash" if kind == "crash" else "pause"
        ran = f" ({row['run']} run, one per {per} class)" if row["run"] != row["scenarios"] else ""
        out.append(f"  {kind:<14} {row['scenarios']:>6} scenarios{ran}, {row['held']} held, {row['violated']} violated, {row['wasted_calls']} wasted calls")
    lost = [r for r in report.results if r.outcome.lost_commits]
    if lost:  # counted and named, never a violation by itself (chaos.hostfaults.power_checks)
        out.append(f"  power cuts took acknowledged commits in {len(lost)} scenarios ({sum(len(r.outcome.lost_commits) for r in lost)} "
                   f"named in --json), e.g. at {lost[0].id} [{lost[0].fault}]: {'; '.join(lost[0].outcome.lost_commits[:3])}")
    if "interleave" in report.faults:
        ran = sum(1 for r in report.results if r.fault == "interleave")
        out.append(f"  interleavings: {ran} pairs run of {report.pairs_possible} possible")
    held = sum(1 for r in report.results if r.outcome.held)
    failing = sum(1 for b in report.baselines.values() if not b.held)
    notes = [f"{failing} failing without any fault"] if failing else []
    notes += [f"{len(report.skipped)} skipped"] if report.skipped else []
    extra = f", {' and '.join(notes)}" if notes else ""
    out.append(
        f"{report.points} points in {len(report.baselines)} families{extra} ({report.mode} mode, seed {report.seed}): "
        f"{held} held, {report.points - held} violated, {report.wasted_calls} wasted calls, {report.seconds:.1f}s"
    )
    return "\n".join(out)


def _ranges(lines: list[int]) -> str:
    spans: list[str] = []
    start = prev = None
    for line in lines + [None]:  # type: ignore[list-item]
        if start is None:
            start = prev = line
        elif line is not None and line == prev + 1:  # type: ignore[operator]
            prev = line
        else:
            spans.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = line
    return ", ".join(spans)


def _short(path: str) -> str:
    cwd = os.getcwd()
    return os.path.relpath(path, cwd) if path.startswith(cwd) else path
