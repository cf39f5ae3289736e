"""Random histories as a test: two settings profiles, a two-line test factory, and :func:`explore`.

Gate your own engine (through its adapter) in two lines of any test module::

    import chaos.machine
    TestMyEngine = chaos.machine.state_machine_test("mypkg.crash:adapter", profile="ci")

Every distinct failure (one per invariant and kind of event that revealed it) shows Hypothesis's
shrunk program, what each step did (where a worker was killed, what a run returned), the violated
invariant and what it protects, and the one command that replays it:
``python -m chaos explore --target mypkg.crash:adapter --profile ci --seed 0``. ``ignore=`` (the
CLI's ``--ignore``) looks past a known weakness: those invariants are counted, not failed on.

>>> report = explore(profile="ci", max_examples=2, stateful_step_count=5)
>>> report.passed, report.examples
(True, 2)
"""

from __future__ import annotations

import contextlib
import importlib
import random
import shlex
import sys
import time
import unittest
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import hypothesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition
from hypothesis.stateful import run_state_machine_as_test

from chaos.adapter import REFERENCE_TARGET, load_adapter
from chaos.core.target import resolve
from chaos.histories.state_machine import AT_REST, BEFORE, IGNORABLE, Histories, InvariantViolated, baseline_violations, machine_for
from chaos.core.invariants import Violation
from chaos.core.scenario import MODES

__all__ = [
    "PROFILES",
    "DEFAULT_SEED",
    "ExploreReport",
    "Finding",
    "IGNORABLE",
    "Histories",
    "InvariantViolated",
    "explore",
    "machine_for",
    "replay_command",
    "state_machine_test",
    "run_cli",
    "bench_rows",
]

DEFAULT_SEED = 0
# Every history is a fresh database, so no example database: a CI run cannot be surprised by an
# example stored by an earlier one, and a seed alone replays a run. Every distinct failure is
# reported (Hypothesis tells them apart by type: one per invariant and kind of event), no
# "explain" phase (it traces lines, as the crash points do).
_COMMON = dict(
    deadline=None,
    database=None,
    derandomize=False,
    print_blob=False,
    report_multiple_bugs=True,
    suppress_health_check=list(HealthCheck),
    phases=(Phase.explicit, Phase.generate, Phase.shrink),
)
PROFILES: dict[str, settings] = {
    # ~3,900 rules: well under a minute on one core, the same histories every run (seed 0). Many
    # short histories find more than a few long ones for the same number of steps.
    "ci": settings(max_examples=130, stateful_step_count=30, **_COMMON),  # type: ignore[arg-type]
    # 125,000 rules, a fresh seed each night unless one is given.
    "nightly": settings(max_examples=2_500, stateful_step_count=50, **_COMMON),  # type: ignore[arg-type]
}
# Registered under prefixed names: Hypothesis has a "ci" profile of its own, which a project's
# other tests may rely on. ``--hypothesis-profile crashgate-ci`` selects ours.
for _name, _profile in PROFILES.items():
    settings.register_profile(f"crashgate-{_name}", _profile)


@dataclass
class Finding:
    """One distinct failure: the invariant and the kind of event that revealed it, shrunk."""

    invariant: str
    event: str
    failure: str
    program: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    replay: str = ""
    flaky: bool = False  # failed once, passed when Hypothesis ran it again: not shrunk
    error: BaseException | None = field(default=None, repr=False, compare=False)  # as Hypothesis raised it

    def format(self) -> str:
        if self.flaky:
            lines = ["program (flaky: it failed, then passed when run again; as it ran when it failed):"]
        else:
            lines = ["shrunk program:"]
        lines += [f"  {line}" for line in self.program] or ["  (Hypothesis printed no program)"]
        lines += ["", self.failure]
        if self.replay and self.replay not in self.failure:
            lines.append(f"replay: {self.replay}")
        return "\n".join(lines)


@dataclass
class ExploreReport:
    """What one exploration did, and every distinct failure it found (each shrunk), if any.

    ``failure``, ``program`` and ``violations`` are those of the first (smallest) finding;
    ``ignored`` counts the violations of ignored invariants seen, per invariant.
    """

    target: str
    profile: str
    seed: int
    rules: int = 0
    examples: int = 0
    raised: int = 0
    seconds: float = 0.0
    findings: list[Finding] = field(default_factory=list)
    ignored: dict[str, int] = field(default_factory=dict)
    replay: str = ""

    @property
    def passed(self) -> bool:
        return not self.findings

    @property
    def failure(self) -> str | None:
        return self.findings[0].failure if self.findings else None

    @property
    def program(self) -> list[str]:
        return self.findings[0].program if self.findings else []

    @property
    def violations(self) -> list[Violation]:
        return self.findings[0].violations if self.findings else []

    @property
    def invariants(self) -> set[str]:
        """Every invariant a finding violated."""
        return {v.invariant for f in self.findings for v in f.violations}

    @property
    def rules_per_s(self) -> float:
        return self.rules / self.seconds if self.seconds else 0.0

    def format(self) -> str:
        """The report as a person reads it: for each finding the shrunk program, the failure, the
        replay command."""
        head = (
            f"explore {self.target} (profile {self.profile}, seed {self.seed}): {self.rules} rules in "
            f"{self.examples} histories, {self.seconds:.1f}s ({self.rules_per_s:.0f} rules/s)"
        )
        if self.raised:
            head += f"; {self.raised} worker {'iteration' if self.raised == 1 else 'iterations'} ended by an exception (the process died, and was restarted)"
        ignored = [f"ignored: {name}, violated {n} {'time' if n == 1 else 'times'}" for name, n in sorted(self.ignored.items())]
        if self.passed:
            return "\n".join([f"{head}: every invariant held" + (" but the ignored ones" if self.ignored else ""), *ignored])
        count = len(self.findings)
        lines = [f"{head}: FAILED" + (f", {count} distinct findings" if count > 1 else ""), *ignored]
        for number, finding in enumerate(self.findings, 1):
            if count > 1:
                lines += ["", f"finding {number} of {count}: {finding.invariant}, revealed by {_revealed(finding.event)}"]
            lines += ["", finding.format()]
        return "\n".join(lines)


def _revealed(event: str) -> str:
    """What revealed a finding, for its heading: ``a Run``, ``the checks at rest``, ..."""
    if event == AT_REST:
        return "the checks at rest"
    return event if event == BEFORE else f"a {event}"


def replay_command(target: str, profile: str, seed: int, ignore: Iterable[str] = (), max_examples: int | None = None,
                   shrink_s: float | None = None) -> str:
    """The one command that runs the same exploration again (and so shrinks to the same programs):
    the same budgets too, where they were not the profile's (a shrink bounded in time may stop
    elsewhere on a slower machine)."""
    parts = ["python", "-m", "chaos", "explore", "--target", target, "--profile", profile, "--seed", str(seed)]
    if max_examples is not None:
        parts += ["--max-examples", str(max_examples)]
    if shrink_s is not None:
        parts += ["--shrink-seconds", f"{shrink_s:g}"]
    for name in ignore:
        parts += ["--ignore", name]
    return " ".join(shlex.quote(p) for p in parts)


def explore(
    target: Any = REFERENCE_TARGET,
    *,
    profile: str = "ci",
    seed: int | None = None,
    modes: Iterable[str] = MODES,
    ignore: Iterable[str] = (),
    shrink_s: float | None = None,
    **overrides: Any,
) -> ExploreReport:
    """Run random histories of ``target`` (``module:attr`` or an adapter) under a profile.

    ``seed`` defaults to :data:`DEFAULT_SEED` for ``ci`` (the same histories every run), to
    pytest's ``--hypothesis-seed`` when given, and to a fresh seed for ``nightly``. ``overrides``
    are Hypothesis settings (e.g. ``max_examples=10``). A violation of an invariant in ``ignore``
    (names from :data:`IGNORABLE`) is counted in :attr:`ExploreReport.ignored`, not a finding: a
    team looks past a known weakness for other bugs. ``shrink_s`` bounds the time spent shrinking
    the findings, all of them together (default: Hypothesis's own bound, five minutes): a run with
    several distinct findings shrinks each as far as that time gets. Never raises for a violation:
    look at :attr:`ExploreReport.passed` and :attr:`ExploreReport.findings`.
    """
    report, _ = _explore(target, profile, seed, tuple(modes), overrides, tuple(ignore), shrink_s)
    return report


def state_machine_test(
    target: str = REFERENCE_TARGET,
    profile: str = "ci",
    *,
    seed: int | None = None,
    modes: Iterable[str] = MODES,
    ignore: Iterable[str] = (),
    shrink_s: float | None = None,
    **overrides: Any,
) -> type[unittest.TestCase]:
    """A ``unittest.TestCase`` class (pytest collects it) that explores ``target``'s histories.

    >>> TestReference = state_machine_test("chaos:reference_adapter", profile="ci")
    >>> TestReference.__name__
    'TestCrashgateHistories'

    The adapter is loaded when the test runs, so a wrong target fails that test, not collection.
    A failure re-raises the original error with the shrunk program and the replay command added
    (several distinct ones: the first finding's error, the others in its notes). ``ignore`` and
    ``shrink_s`` are as for :func:`explore`. The seed is ``seed``, else ``@hypothesis.seed(N)`` on
    the class, else ``--hypothesis-seed``, else the profile's default.
    """
    _profile(profile)
    chosen, ignored = tuple(modes), tuple(ignore)
    _check_ignore(ignored)

    class TestCrashgateHistories(unittest.TestCase):
        def runTest(self) -> None:
            pinned = seed if seed is not None else getattr(type(self), "_hypothesis_internal_use_seed", None)
            report, error = _explore(target, profile, pinned, chosen, overrides, ignored, shrink_s)
            if error is not None:
                # The first (shortest) finding's own error, the others as notes: a test framework
                # shows one failure, and every finding in it.
                first = report.findings[0].error if report.findings and report.findings[0].error is not None else error
                for number, other in enumerate(report.findings[1:], 2):
                    first.add_note(f"\nfinding {number} of {len(report.findings)}: {other.invariant}, revealed by {_revealed(other.event)}\n{other.format()}")
                if report.replay not in str(first):
                    first.add_note(f"replay: {report.replay}")
                raise first

    TestCrashgateHistories.__doc__ = f"Random histories of {target} (profile {profile})."
    return TestCrashgateHistories


def run_cli(args: Any) -> int:
    """Run ``explore`` from parsed arguments: 0 if every invariant held, 1 on a violation, 2 on bad input."""
    overrides = {} if args.max_examples is None else {"max_examples": args.max_examples}
    try:
        report = explore(args.target, profile=args.profile, seed=args.seed, ignore=getattr(args, "ignore", None) or (),
                         shrink_s=getattr(args, "shrink_seconds", None), **overrides)
    except ValueError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(report.format())
    return 0 if report.passed else 1


BENCH_EXAMPLES = {True: 8, False: 60}  # quick (a smoke test of the code path), full


def bench_rows(quick: bool) -> list[dict[str, Any]]:
    """Steps (rules) per second of whole explorations of the reference engine, with and without
    fork-mode kills: generation, every check, setup and teardown included, no failure to shrink."""
    out = []
    for key, modes, label in (
        ("machine_rules_per_s_inprocess", ("inprocess",), "state machine rules/s, in-process kills only, 1 core"),
        ("machine_rules_per_s_fork", MODES, "state machine rules/s, fork and in-process kills, 1 core"),
    ):
        report = explore(REFERENCE_TARGET, profile="ci", seed=DEFAULT_SEED, modes=modes, max_examples=BENCH_EXAMPLES[quick])
        note = f"{report.rules} rules in {report.examples} histories, {report.seconds:.1f}s"
        out.append({"key": key, "label": label, "value": round(report.rules_per_s, 1), "unit": "rules/s", "note": note})
    return out


def _profile(name: str) -> settings:
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"profile {name!r} is not one of: {', '.join(PROFILES)}") from None


def _check_ignore(ignore: tuple[str, ...]) -> None:
    unknown = sorted(set(ignore) - set(IGNORABLE))
    if unknown:
        raise ValueError(f"--ignore {', '.join(map(repr, unknown))} is not an invariant random histories check; pass one of: {', '.join(IGNORABLE)}")


def _seed(profile: str, seed: int | None) -> int:
    if seed is not None:
        return seed
    forced = getattr(hypothesis.core, "global_force_seed", None)  # pytest --hypothesis-seed
    if isinstance(forced, int):
        return forced
    if profile == "ci":
        return DEFAULT_SEED
    return random.SystemRandom().randrange(2**32)


def _explore(target: Any, profile: str, seed: int | None, modes: tuple[str, ...], overrides: dict[str, Any],
             ignore: tuple[str, ...] = (), shrink_s: float | None = None) -> tuple[ExploreReport, BaseException | None]:
    _check_ignore(ignore)
    if shrink_s is not None and not shrink_s > 0:
        raise ValueError(f"shrink time {shrink_s!r} must be a positive number of seconds")
    chosen = settings(_profile(profile), **overrides)
    adapter = resolve(load_adapter(target) if isinstance(target, str) else target)
    name = target if isinstance(target, str) else f"{type(target).__module__}:{type(target).__qualname__}"
    seed = _seed(profile, seed)
    machine: type[Histories] = machine_for(adapter, target=name, modes=modes, ignore=ignore)
    report = ExploreReport(name, profile, seed, replay=replay_command(name, profile, seed, ignore, overrides.get("max_examples"), shrink_s))
    machine.replay = report.replay
    hypothesis.seed(seed)(machine)
    error: BaseException | None = None
    started = time.perf_counter()
    failed_baseline = baseline_violations(adapter)
    if failed_baseline:
        report.findings = [Finding("baseline", BEFORE, f"InvariantViolated: {failed_baseline[0]}", violations=failed_baseline, replay=report.replay)]
        return report, InvariantViolated(failed_baseline, BEFORE, [], report.replay)
    try:
        with _without_local_constants(), _generating_to_the_end(), _shrinking_for(shrink_s):
            run_state_machine_as_test(machine, settings=chosen)
    except Exception as exc:  # violations, or anything the engine raised: all are reported
        error = exc
    report.seconds = time.perf_counter() - started
    report.rules = machine.stats["rules"]
    report.examples = machine.stats["examples"]
    report.raised = machine.stats["raised"]
    report.ignored = dict(machine.ignored)
    if error is not None:
        report.findings = _findings(error, report.replay)
    return report, error


FINDINGS_MAX = 100  # a bound on the walk through nested exception groups


def _findings(error: BaseException, replay: str) -> list[Finding]:
    """One finding per distinct failure Hypothesis reported (an ``ExceptionGroup`` of them when
    there are several), each (invariant, event kind) once, the shortest program first (one whose
    shrinking ran out of time is long)."""
    failures = [error]
    if isinstance(error, BaseExceptionGroup) and not isinstance(error, FlakyFailure):
        failures = list(error.exceptions)
    assert len(failures) <= FINDINGS_MAX, f"{len(failures)} failures: more than {FINDINGS_MAX}"
    out: dict[tuple[str, str], Finding] = {}
    for failure in failures:
        finding = _finding(failure, replay)
        out.setdefault((finding.invariant, finding.event), finding)
    return sorted(out.values(), key=lambda f: len(f.program))


# What a history run again that went another way tells (Hypothesis's FlakyStrategyDefinition: the
# steps it drew depend on what the engine did, a worker frozen at a point or not).
NOT_REPEATED = ("a random history, run again, went another way: a worker stopped or killed at a point in one run "
                "was not in the other, so the history can be neither replayed nor shrunk, and what it tested is "
                "unknown; the engine does not do the same when run again (its own threads, the machine's clock or "
                "randomness it was not given)")


def _finding(error: BaseException, replay: str) -> Finding:
    """The finding ``error`` (what the exploration raised) tells of.

    >>> finding = _finding(FlakyStrategyDefinition("Inconsistent data generation!"), "python -m chaos explore")
    >>> finding.invariant, finding.violations[0].detail.startswith("a random history, run again, went another way")
    ('point-reached', True)
    """
    # Hypothesis attaches the shrunk program to the error, one step per note.
    notes = [line for note in getattr(error, "__notes__", []) for line in str(note).splitlines()]
    program = [line for line in notes if line.startswith("state")]
    flaky = isinstance(error, FlakyFailure)
    seen = _first_violation(error) if flaky else error
    failure = f"{type(error).__name__}: {error}"
    if flaky and seen is not None:
        # Hypothesis could not make it fail again, so it printed no program: the one that ran
        # when it failed is in the violation's log, and the violation is the one that was seen.
        program = program or list(getattr(seen, "log", []))
        failure = f"{failure}\nwhat was seen when it failed:\n{type(seen).__name__}: {seen}"
    if isinstance(seen, InvariantViolated):
        invariant, event, violations = seen.invariant, seen.kind, list(seen.violations)
    elif isinstance(seen or error, FlakyStrategyDefinition):  # not the engine raising: the engine not repeating itself
        invariant, event, violations = "point-reached", "History", [Violation("point-reached", NOT_REPEATED)]
        failure = f"point-reached: {NOT_REPEATED} ({failure})"
    else:  # the engine or the harness raised: a failure too, known by its type
        invariant, event, violations = "raised", type(seen or error).__name__, []
    return Finding(invariant or "raised", event, failure, program, violations, replay, flaky, error)


def _first_violation(error: BaseException) -> BaseException | None:
    """The first exception inside a (flaky) group that is not a group itself."""
    pending = [error]
    for _ in range(FINDINGS_MAX):
        if not pending:
            return None
        current = pending.pop(0)
        if not isinstance(current, BaseExceptionGroup):
            return current
        pending = list(current.exceptions) + pending
    return None


@contextlib.contextmanager
def _generating_to_the_end() -> Iterator[None]:
    """Keep Hypothesis generating histories until ``max_examples`` after a first failure.

    With ``report_multiple_bugs``, Hypothesis stops generating 10 seconds after the first failure,
    or once as many calls again found nothing new: a slow history (a fork, a frozen worker) makes
    that a handful, and the bugs behind the first go unseen. Explore is a search for bugs: it
    spends its whole budget looking. Twice ``max_examples`` calls bound a run whose every history
    fails (failing histories are not "valid" examples). Without a shrink phase Hypothesis's rule
    stands (stop at the first failure).
    """
    engine = importlib.import_module("hypothesis.internal.conjecture.engine")
    runner = getattr(engine, "ConjectureRunner", None)
    original = getattr(runner, "should_generate_more", None)
    if original is None:
        yield  # a Hypothesis without the method: its own rule stands
        return

    def should_generate_more(self: Any) -> bool:
        keep_looking = self.settings.report_multiple_bugs and Phase.shrink in self.settings.phases
        if not getattr(self, "interesting_examples", None) or not keep_looking:
            return bool(original(self))  # nothing found yet, or a run that wants out fast
        budget = self.settings.max_examples
        return self.valid_examples < budget and self.call_count < 2 * budget

    runner.should_generate_more = should_generate_more
    try:
        yield
    finally:
        runner.should_generate_more = original


@contextlib.contextmanager
def _shrinking_for(seconds: float | None) -> Iterator[None]:
    """Bound the time Hypothesis spends shrinking (its ``MAX_SHRINKING_SECONDS``, all findings
    together) to ``seconds``; None leaves its own bound."""
    engine = importlib.import_module("hypothesis.internal.conjecture.engine")
    original = getattr(engine, "MAX_SHRINKING_SECONDS", None)
    if seconds is None or original is None:
        yield  # its own bound, or a Hypothesis without one
        return
    setattr(engine, "MAX_SHRINKING_SECONDS", seconds)  # read when shrinking starts
    try:
        yield
    finally:
        setattr(engine, "MAX_SHRINKING_SECONDS", original)


@contextlib.contextmanager
def _without_local_constants() -> Iterator[None]:
    """Keep Hypothesis from drawing integers out of the constants of the project's modules.

    Now and then Hypothesis draws a constant found in the "local" modules imported so far instead
    of a random integer. Which modules those are differs between pytest and the command line, and
    grows as a test run imports more, so the same seed would explore different histories and a
    replay command would not replay. Its own global constants stay in use.
    """
    providers = importlib.import_module("hypothesis.internal.conjecture.providers")
    local, cache, empty = getattr(providers, "_get_local_constants", None), getattr(providers, "CONSTANTS_CACHE", None), None
    if local is None or cache is None or not hasattr(providers, "Constants"):
        yield  # a Hypothesis without the feature
        return
    empty = providers.Constants()
    providers._get_local_constants = lambda: empty
    cache.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = local
        cache.cache.clear()
