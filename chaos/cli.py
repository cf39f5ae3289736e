"""``python -m chaos``: the harness's command line, a thin layer over the library.

``matrix`` kills a worker at every crash point and checks the invariants; it exits 1 on any
violation, printing for each the invariant, what was seen, and the one command that replays it.
``explore`` runs random histories (chaos.machine) and exits 1 with the shrunk program of every distinct
violation (``--ignore INVARIANT`` looks past a known one). ``survey`` runs both on each engine of
chaos.survey's registry (libraries too) and exits 0 when they ran: its findings are its product.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Iterable, Sequence

import engine
from engine.arguments import OneLineParser, non_negative_int, positive_int
from engine.terminal import printable, stdout_closed

from chaos.adapter import REFERENCE_TARGET
from chaos.matrix.runner import DEFAULT_FAULTS, DEFAULT_SEED, FAULTS, PAIRS_DEFAULT, MatrixReport, MatrixUsageError, run_matrix
from chaos.core.annotations import annotations, on_github_actions, shown_path
from chaos.core.hangs import BASELINE_FACTOR, SCENARIO_TIMEOUT_S, check_timeout
from chaos.core.findings import KnownKey, findings, headlines, known_json, known_keys, known_line, plural, read_known
from chaos.core.scenario import MODES
from chaos.core.unreachable import MARKER

__all__ = ["main", "COMMANDS", "PROG", "format_report", "invoked_as", "version"]

# The program's name in usage lines and errors when nothing says how it was started (a program that
# calls main() with its own arguments, the generated reference page).
PROG = "python -m chaos"
DISTRIBUTION = "crashgate"
POSTGRES_TARGET = "chaos:postgres_adapter"
COMMANDS = ("matrix", "baseline", "explore", "adapter", "survey", "demo", "soak", "plans")
SOURCE_CHARS_MAX = 60


def _matrix_arguments(m: argparse.ArgumentParser) -> None:
    """The options of a matrix run (``matrix`` and ``baseline``)."""
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
    m.add_argument("--pairs", type=non_negative_int, default=PAIRS_DEFAULT, help=f"interleaving pairs to run in each family, a seeded sample (default {PAIRS_DEFAULT} per family)")
    m.add_argument("--allow-effects", default="", metavar="KIND:PATTERN,...",
                   help="what the steps do that is no effect on the world: file:GLOB, connect:HOST:PORT (read only), "
                        "http:HOST:PORT (POST, PUT, PATCH, DELETE), mail:HOST:PORT, subprocess:GLOB (every other file written, "
                        "connection, mail or process a step starts fails effects-through-outbox)")
    m.add_argument("--scenario-timeout", type=_seconds, metavar="S",
                   help=f"seconds one scenario may run before it is a 'hangs' finding (its processes' stacks taken, then "
                        f"killed) and the run goes on (default: the adapter's scenario_timeout_s, else {SCENARIO_TIMEOUT_S:g}; "
                        f"a family's points get at least {BASELINE_FACTOR:g} times its baseline's time)")
    m.add_argument("--json", action="store_true", help="print a JSON summary instead of the table")
    m.add_argument("--exhaustive", action="store_true",
                   help="pause at every point, not once per pause class (points with no visible operation between them)")
    m.add_argument("--backend", choices=("sqlite", "postgresql"), default="sqlite",
                   help="postgresql: scenario databases on a PostgreSQL server (--db, or a throwaway local one)")
    m.add_argument("--db", help="postgresql://... URL of a server whose user may create databases (implies --backend postgresql)")
    m.add_argument("--verbose", action="store_true", help="print a line per point before the findings and the summary")
    m.add_argument("--quiet", action="store_true", help="print only findings and the summary (the default; kept for old scripts)")


def invoked_as(argv0: str) -> str:
    """The program's name as its user typed it, from ``sys.argv[0]``: ``crashgate`` for the
    console script (whatever folder it is in), ``python -m chaos`` for the module, whose
    ``sys.argv[0]`` is the path of ``chaos/__main__.py``.

    >>> invoked_as("/venv/bin/crashgate"), invoked_as("/src/chaos/__main__.py"), invoked_as("-c")
    ('crashgate', 'python -m chaos', 'python -m chaos')
    """
    name = os.path.basename(argv0)
    if not name or name.startswith("-") or name == "__main__.py":
        return PROG
    return name


def version() -> str:
    """crashgate's version: that of the checkout the code was imported from (its pyproject.toml,
    beside the package), else that of the installed distribution, else "unknown". The checkout
    comes first because an installed crashgate's metadata may belong to another copy than the one
    running (a checkout on PYTHONPATH beside an installed wheel)."""
    import tomllib
    from importlib import metadata

    pyproject = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyproject.toml")
    try:
        with open(pyproject, "rb") as f:
            project = tomllib.load(f).get("project", {})
        if project.get("name") == DISTRIBUTION and isinstance(project.get("version"), str):
            return project["version"]
    except (OSError, tomllib.TOMLDecodeError):  # no checkout around the package: an installed copy
        pass
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown"


class _Version(argparse.Action):
    """``--version``: print ``crashgate VERSION`` and exit 0, reading the version only when asked
    (argparse's own version action wants it when the parser is built, at every run)."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(option_strings, dest=dest, default=argparse.SUPPRESS, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> None:
        print(f"{DISTRIBUTION} {version()}")  # on standard output, as argparse's own version action
        parser.exit(0)


def _parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = OneLineParser(prog=prog, description="Crash-test a durable workflow engine.")
    parser.add_argument("--version", action=_Version, help="print crashgate's version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("matrix", help="kill a worker at every crash point and check the invariants")
    _matrix_arguments(m)
    m.add_argument("--baseline", metavar="FILE",
                   help="a file of known findings (python -m chaos baseline): only findings not in it fail the run")
    b = sub.add_parser(
        "baseline", help="run the matrix and print its findings as JSON: a file of known findings for matrix --baseline")
    _matrix_arguments(b)
    b.add_argument("--plan", action="append", metavar="FILE",
                   help="print the findings of this fault plan's items instead (repeatable), for pytest's --chaos-baseline; "
                        "--faults is for a plan without a fault key, --sample N runs a seeded sample of its items")
    # Random histories (chaos.machine, which imports Hypothesis only when the command runs).
    e = sub.add_parser("explore", help="random histories of runs, kills, clock jumps and faults; a failure is shrunk and replayable")
    e.add_argument("--target", default=REFERENCE_TARGET, help=f"adapter as MODULE:ATTR (default {REFERENCE_TARGET})")
    e.add_argument("--profile", choices=("ci", "nightly"), default="ci", help="ci: about 4,000 steps, seed 0 (default); nightly: 125,000 steps")
    e.add_argument("--seed", type=int, help="seed of the exploration (default: 0 for ci, a fresh one for nightly; printed either way)")
    e.add_argument("--max-examples", type=positive_int, help="explore at most this many histories (default: the profile's)")
    e.add_argument("--shrink-seconds", type=positive_int, metavar="S",
                   help="shrink the findings for at most S seconds in all (default: Hypothesis's five minutes)")
    e.add_argument("--ignore", action="append", default=[], metavar="INVARIANT",
                   help="count this invariant's violations, but do not fail on them: look past a known weakness for other bugs (repeatable)")
    a = sub.add_parser("adapter", help="which optional capabilities an adapter offers, and what each missing one disables")
    a.add_argument("--target", default=REFERENCE_TARGET, help=f"adapter as MODULE:ATTR (default {REFERENCE_TARGET})")
    _survey_arguments(sub.add_parser("survey", help="the crash matrix and random histories of each engine (libraries too), "
                                                    "findings said in one sentence each, with a replay command"))
    from chaos.fleet import demo as _demo
    from chaos.fleet import soak as _soak  # the fleet commands: workers, sender and monkey as real processes

    _demo.add_arguments(sub.add_parser("demo", help="workers SIGKILLed at random while documents go through; nothing lost",
                                       description=_demo.DESCRIPTION))
    _soak.add_arguments(sub.add_parser("soak", help="a long kill-and-restart run on sqlite or postgresql, then every invariant",
                                       description=_soak.DESCRIPTION))
    from chaos.plans import files as plan_files  # `plans init`: copy the shipped fault plans into a project

    plan_files.add_arguments(sub)
    return parser


def _survey_arguments(s: argparse.ArgumentParser) -> None:
    """The options of ``survey`` (chaos.survey; its registry names the engines)."""
    from chaos.survey import BUDGETS, ENGINES

    s.add_argument("--engine", action="append", metavar="NAME",
                   help=f"survey this engine (repeatable): one of {', '.join(ENGINES)} (default: every one)")
    s.add_argument("--target", action="append", metavar="MODULE:ATTR",
                   help="survey an adapter of your own as well (repeatable; alone, instead of the registry's engines)")
    s.add_argument("--budget", choices=tuple(BUDGETS), default="standard",
                   help="small: a seeded sample of 100 scenarios and 8 random histories per engine; standard: 600 and 40 (default); "
                        "full: every crash point, one per pause class, 200 interleaving pairs per family and 130 histories")
    s.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of every RNG in the survey (default 0)")
    s.add_argument("-n", "--jobs", type=_jobs, default=os.cpu_count() or 1,
                   help="processes to spread the matrix over: a number or 'auto' (default: every core, here %(default)s)")
    s.add_argument("--json", action="store_true", help="print one JSON document instead of the text")
    s.add_argument("--plain", action="store_true", help="progress as plain lines (also when stderr is not a terminal, or CI=true)")


def main(argv: Sequence[str] | None = None, *, prog: str = PROG) -> int:
    """Run one command; ``prog`` is the program's name in usage lines and errors."""
    args = _parser(prog).parse_args(argv)
    try:
        return _command(args)
    except BrokenPipeError:  # the reader (e.g. `| head`) stopped reading: not an error
        return stdout_closed()
    except KeyboardInterrupt:  # Ctrl-C: the run's processes got the signal too and are gone
        print("interrupted: no verdict", file=sys.stderr)
        return 130


def _command(args: argparse.Namespace) -> int:
    if args.command in ("demo", "soak"):
        from chaos.fleet import demo as _demo
        from chaos.fleet import soak as _soak

        return _demo.run_demo(args) if args.command == "demo" else _soak.run_soak(args)
    if args.command == "explore":
        from chaos import machine

        return machine.run_cli(args)
    if args.command == "baseline" and args.plan:
        return _plan_baseline(args)
    if args.command in ("matrix", "baseline"):
        return _matrix(args)
    if args.command == "adapter":
        return _adapter(args)
    if args.command == "survey":
        from chaos import survey

        return survey.run_cli(args)
    if args.command == "plans":
        from chaos.plans import files

        return files.run(args)
    return 2


def _disabled_by_missing_capabilities(target: str) -> list[str]:
    """One line per optional capability the target lacks that switches a fault or check off."""
    from chaos.core.capabilities import capability_report
    from chaos.core.target import load_target

    out = []
    for line in capability_report(load_target(target), missing_only=True):
        if line.strip().startswith("error:"):  # the sessions could not be asked: said as it is
            out.append(f"capability check failed:{line.strip()[len('error:'):]}")
        elif "this disables" in line:
            out.append(f"capability missing:{line[6:]}")
    return out


def _adapter(args: argparse.Namespace) -> int:
    """The target resolved (:func:`chaos.core.target.examine`) and its declaration checked against
    the engine: every problem found, one line each, exit 2; else each capability as resolved."""
    from chaos.adapter import load_adapter
    from chaos.core.capabilities import capability_report
    from chaos.core.target import examine

    try:
        adapter = load_adapter(args.target)
    except ValueError as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)
        return 2
    target, problems = examine(adapter)
    if target.check_declaration is not None:
        try:
            target.check_declaration()
        except ValueError as exc:
            problems.append(str(exc))
    for problem in problems:
        print(f"error: {args.target}: {printable(problem)}", file=sys.stderr)
    if problems:
        return 2
    print(f"{args.target}: the required protocol is there (chaos.adapter.Adapter); optional capabilities:")
    for line in capability_report(target):
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
                allowed_effects=args.allow_effects.split(","),
                scenario_timeout_s=args.scenario_timeout,
            )
        except MatrixUsageError as exc:  # what it was given; a ValueError of the run itself is a bug, with its traceback
            print(f"error: {printable(exc)}", file=sys.stderr)
            return 2
    known_file = getattr(args, "baseline", None)
    try:
        known = read_known(known_file) if known_file else set()
    except ValueError as exc:
        print(f"error: {printable(exc)}", file=sys.stderr)
        return 2
    found = known_keys(report)
    try:
        if args.command == "baseline":
            print(json.dumps(known_json(report.target, found), indent=2))
            return 0
        if args.json:
            print(json.dumps(report.to_json(), indent=2))
        else:
            for line in _disabled_by_missing_capabilities(target):
                print(line)
            print(format_report(report, verbose=args.verbose and not args.quiet, known=known))
            for by in ("the run", "the adapter"):
                entries = [entry for entry, who in report.allowed_effects if who == by]
                if entries:
                    print(f"effects allowed (by {by}), not findings: {', '.join(entries)}")
            if known_file:
                print(f"{len(found & known)} known findings (in {known_file}) left out, {len(found - known)} new")
            gone = sorted(known - found)
            if gone:
                print(f"known findings no longer seen ({len(gone)}), to drop from {known_file}:")
                for key in gone[:KNOWN_SHOWN_MAX]:
                    print(f"  {known_line(key)}")
        if on_github_actions():
            for line in annotations(report, known):
                print(line)
    except BrokenPipeError:  # the reader (e.g. `| head`) stopped reading: the verdict still stands
        stdout_closed()
    if known_file:
        return 1 if found - known else 0
    return 1 if report.violations else 0


KNOWN_SHOWN_MAX = 20


def _plan_baseline(args: argparse.Namespace) -> int:
    """``baseline --plan FILE``: the known findings of fault plans' items, keyed as the plugin keys them."""
    from chaos.plans.known import plan_known_keys

    found: set[KnownKey] = set()
    targets: list[str] = []
    faults = tuple(f.strip() for f in args.faults.split(",") if f.strip())
    for path in args.plan:
        try:
            target, keys = plan_known_keys(path, args.target, seed=args.seed, mode=args.mode, faults=faults, pairs=args.pairs,
                                           selection=str(args.sample) if args.sample else "all")
        except ValueError as exc:
            print(f"error: {printable(exc)}", file=sys.stderr)
            return 2
        found |= keys
        targets += [target] if target not in targets else []
    try:
        print(json.dumps(known_json(",".join(targets), found), indent=2))
    except BrokenPipeError:
        return stdout_closed()
    return 0


def _seconds(text: str) -> float:
    """An argparse type: a number of seconds > 0 (a scenario's bound)."""
    try:
        return check_timeout(text, "--scenario-timeout")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds > 0; pass e.g. 60") from None


def _jobs(text: str) -> int:
    """An argparse type: a number of processes (at least 1), or ``auto`` for every core."""
    return (os.cpu_count() or 1) if text == "auto" else positive_int(text)


def format_report(report: MatrixReport, *, verbose: bool = False, known: Iterable[KnownKey] = ()) -> str:
    """The matrix as a person reads it: how the families fail without any fault first, then each
    finding once (grouped by invariant and cause, with its count, the user's line, the fix and a
    replay command), coverage and a summary. ``verbose``: a row per point and every violation at
    every point as well. ``known``: findings of a file of known findings, left out."""
    out: list[str] = []
    known = set(known)
    for head in headlines(report):
        if all((family, "", head.invariant, head.cause) in known for family in head.families):
            continue
        families = ", ".join(head.families)
        points = f", and at {head.points} points" if head.points else ""
        label = "" if head.invariant == "baseline" else f"{head.invariant}: "
        out.append(f"FAILS WITHOUT ANY FAULT in {len(head.families)} of {len(report.baselines)} families ({families}){points}: "
                   f"{label}{head.example if head.invariant == 'baseline' else _shorten(head.example)}")
        if head.fix:
            out.append(f"  fix: {head.fix}")
        out.append(f"  lesson: {printable(report.lessons[head.families[0]])}")
        out.append(f"  replay: {_family_replay(report, head.families[0])}")
    for name, reason in report.skipped.items():
        out.append(f"skipped: family {name!r}: {reason}")
    unfaulted = report.unfaulted_tasks()
    if unfaulted:  # a paid call whose failures no family tried: the gate says nothing of its error paths
        out.append(f"not faulted: no family's fault reached the paid calls of {'task' if len(unfaulted) == 1 else 'tasks'} {', '.join(map(repr, unfaulted))} (faults "
                   f"were armed on {', '.join(sorted(map(repr, report.faulted_tasks)))}); map the reference's task names "
                   "to yours with the adapter's tasks() to try their error paths too")
    if verbose:
        out.append(f"{'fault':<14} {'point':<52} {'source':<{SOURCE_CHARS_MAX}} {'outcome':<11} wasted")
        for r in report.results:
            outcome = "held" if r.outcome.held else "VIOLATED"
            if r.outcome.held and r.outcome.exit not in ("killed", "paused", "interleaved", "faulted"):
                outcome = r.outcome.exit
            out.append(f"{r.fault:<14} {r.id:<52} {r.source[:SOURCE_CHARS_MAX]:<{SOURCE_CHARS_MAX}} {outcome:<11} {r.outcome.wasted_calls}")
        out.append("")
        for r in report.results:
            for v in r.outcome.violations:
                out.append(f"VIOLATION {v.invariant} at {r.id} [{r.fault}] ({_short(r.point.file)}:{r.point.line}: {r.source})")
                out.append(f"  seen: {v.detail}")
                out.append(f"  replay: {r.replay}")
    for n, f in enumerate(findings(report, known=known), 1):
        faults = ", ".join(f"{kind} {count}" for kind, count in f.faults.most_common())
        families = ", ".join(f.families)
        first = f.first
        out.append(f"FINDING {n}: {f.invariant} at {plural(f.points, 'point')} of {plural(len(f.families), 'family', 'families')} ({families}) [{faults}]")
        out.append(f"  seen: {_shorten(f.example)}")
        out.append(f"  where: {f.where or f'{_short(first.point.file)}:{first.point.line}: {first.source}'}"
                   + (f" (the first point: {_short(first.point.file)}:{first.point.line})" if f.where else ""))
        if f.fix:
            out.append(f"  fix: {f.fix}")
        out.append(f"  lesson: {printable(report.lessons[first.family])}")
        out.append(f"  replay: {first.replay}")
    cov = report.coverage()
    if not cov["measured"]:  # only a kill or a freeze at a line counts it
        out.append(f"crash coverage: not measured (it counts the lines a crash or a pause stopped at; this run: "
                   f"{', '.join(report.faults)}{', no line reached' if not cov['lines'] else ''})")
    else:
        out.append(f"crash coverage: {cov['exercised']}/{cov['lines']} executable lines of the functions reached ({cov['percent']}%)"
                   + _declared_summary(cov))
    for path, lines in cov["declared_reached"].items():
        out.append(f"  DECLARED UNREACHABLE, YET KILLED AT: {path}: {_ranges(lines)}: a scenario reached these lines, so their "
                   f"'{MARKER}' declaration is wrong; remove it")
    if verbose:
        for path, lines in cov["declared"].items():
            for reason, numbers in _by_reason(lines).items():
                out.append(f"  declared unreachable: {path}: {_ranges(numbers)}: {reason}")
    engine_dir = os.path.dirname(os.path.abspath(engine.__file__)) + os.sep
    hidden = 0
    for path, lines in sorted(cov["missed"].items(), key=lambda item: os.path.abspath(item[0]).startswith(engine_dir)):
        if not verbose and os.path.abspath(path).startswith(engine_dir) and _user_files(report):
            hidden += len(lines)  # the reference engine's own lines, under a workflow of the user's
            continue
        out.append(f"  not reached by any scenario: {path}: {_ranges(lines)}")
    if hidden:
        out.append(f"  not reached by any scenario: {hidden} lines of the engine/ package (--verbose lists them)")
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


def _user_files(report: MatrixReport) -> bool:
    """Whether the crash points include files outside the engine/ package: a workflow of the user's."""
    engine_dir = os.path.dirname(os.path.abspath(engine.__file__)) + os.sep
    return any(not os.path.abspath(path).startswith(engine_dir) for path in report.executable)


def _shorten(text: str, limit: int = 400) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _family_replay(report: MatrixReport, family: str) -> str:
    """The command that runs one family's points (its baseline first)."""
    return f"python -m chaos matrix --target {report.target} --family {family} --faults {','.join(report.faults)} --seed {report.seed}"


def _declared_summary(cov: dict[str, Any]) -> str:
    """The coverage line's tail: how many lines the engine declares unreachable, and every line's figure."""
    declared = sum(len(lines) for lines in cov["declared"].values())
    if not declared:
        return ""
    every = round(100.0 * cov["all_exercised"] / cov["all_lines"], 1) if cov["all_lines"] else 100.0
    return (f"; {declared} more declared unreachable by an iteration, with their reasons (--verbose lists them; "
            f"every line: {cov['all_exercised']}/{cov['all_lines']}, {every}%)")


def _by_reason(lines: dict[str, str]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for number, reason in lines.items():
        out.setdefault(reason, []).append(int(number))
    return out


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
    return shown_path(path)
