"""Random histories as a test: two settings profiles, a two-line test factory, and :func:`explore`.

Gate your own engine (through its adapter) in two lines of any test module::

    import chaos.machine
    TestMyEngine = chaos.machine.state_machine_test("mypkg.crash:adapter", profile="ci")

A failure shows Hypothesis's shrunk program, what each step did (where a worker was killed, what
a run returned), the violated invariant and what it protects, and the one command that replays
it: ``python -m chaos explore --target mypkg.crash:adapter --profile ci --seed 0``.

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
from hypothesis.stateful import run_state_machine_as_test

from chaos.adapter import REFERENCE_TARGET, load_adapter
from chaos.histories.state_machine import Histories, InvariantViolated, baseline_violations, machine_for
from chaos.core.invariants import Violation
from chaos.core.scenario import MODES

__all__ = [
    "PROFILES",
    "DEFAULT_SEED",
    "ExploreReport",
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
# example stored by an earlier one, and a seed alone replays a run. One bug per report, no
# "explain" phase (it traces lines, as the crash points do).
_COMMON = dict(
    deadline=None,
    database=None,
    derandomize=False,
    print_blob=False,
    report_multiple_bugs=False,
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
class ExploreReport:
    """What one exploration did, and the first failure it found (shrunk), if any."""

    target: str
    profile: str
    seed: int
    rules: int = 0
    examples: int = 0
    raised: int = 0
    seconds: float = 0.0
    failure: str | None = None
    program: list[str] = field(default_factory=list)
    violations: list[Violation] = field(default_factory=list)
    replay: str = ""

    @property
    def passed(self) -> bool:
        return self.failure is None

    @property
    def invariants(self) -> set[str]:
        return {v.invariant for v in self.violations}

    @property
    def rules_per_s(self) -> float:
        return self.rules / self.seconds if self.seconds else 0.0

    def format(self) -> str:
        """The report as a person reads it: the shrunk program, the failure, the replay command."""
        head = (
            f"explore {self.target} (profile {self.profile}, seed {self.seed}): {self.rules} rules in "
            f"{self.examples} histories, {self.seconds:.1f}s ({self.rules_per_s:.0f} rules/s)"
        )
        if self.raised:
            head += f"; {self.raised} worker iteration(s) ended by an exception (the process died, and was restarted)"
        if self.passed:
            return f"{head}: every invariant held"
        lines = [f"{head}: FAILED", "", "shrunk program:"]
        lines += [f"  {line}" for line in self.program] or ["  (not printed)"]
        lines += ["", self.failure or ""]
        if self.replay and self.replay not in (self.failure or ""):
            lines.append(f"replay: {self.replay}")
        return "\n".join(lines)


def replay_command(target: str, profile: str, seed: int) -> str:
    """The one command that runs the same exploration again (and so shrinks to the same program)."""
    parts = ["python", "-m", "chaos", "explore", "--target", target, "--profile", profile, "--seed", str(seed)]
    return " ".join(shlex.quote(p) for p in parts)


def explore(
    target: Any = REFERENCE_TARGET,
    *,
    profile: str = "ci",
    seed: int | None = None,
    modes: Iterable[str] = MODES,
    **overrides: Any,
) -> ExploreReport:
    """Run random histories of ``target`` (``module:attr`` or an adapter) under a profile.

    ``seed`` defaults to :data:`DEFAULT_SEED` for ``ci`` (the same histories every run), to
    pytest's ``--hypothesis-seed`` when given, and to a fresh seed for ``nightly``. ``overrides``
    are Hypothesis settings (e.g. ``max_examples=10``). Never raises for a violation: look at
    :attr:`ExploreReport.passed`.
    """
    report, _ = _explore(target, profile, seed, tuple(modes), overrides)
    return report


def state_machine_test(
    target: str = REFERENCE_TARGET,
    profile: str = "ci",
    *,
    seed: int | None = None,
    modes: Iterable[str] = MODES,
    **overrides: Any,
) -> type[unittest.TestCase]:
    """A ``unittest.TestCase`` class (pytest collects it) that explores ``target``'s histories.

    >>> TestReference = state_machine_test("chaos:reference_adapter", profile="ci")
    >>> TestReference.__name__
    'TestCrashgateHistories'

    The adapter is loaded when the test runs, so a wrong target fails that test, not collection.
    A failure re-raises the original error with the shrunk program and the replay command added.
    The seed is ``seed``, else ``@hypothesis.seed(N)`` on the class, else ``--hypothesis-seed``,
    else the profile's default.
    """
    _profile(profile)
    chosen = tuple(modes)

    class TestCrashgateHistories(unittest.TestCase):
        def runTest(self) -> None:
            pinned = seed if seed is not None else getattr(type(self), "_hypothesis_internal_use_seed", None)
            report, error = _explore(target, profile, pinned, chosen, overrides)
            if error is not None:
                if report.replay not in str(error):
                    error.add_note(f"replay: {report.replay}")
                raise error

    TestCrashgateHistories.__doc__ = f"Random histories of {target} (profile {profile})."
    return TestCrashgateHistories


def run_cli(args: Any) -> int:
    """Run ``explore`` from parsed arguments: 0 if every invariant held, 1 on a violation, 2 on bad input."""
    overrides = {} if args.max_examples is None else {"max_examples": args.max_examples}
    try:
        report = explore(args.target, profile=args.profile, seed=args.seed, **overrides)
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


def _seed(profile: str, seed: int | None) -> int:
    if seed is not None:
        return seed
    forced = getattr(hypothesis.core, "global_force_seed", None)  # pytest --hypothesis-seed
    if isinstance(forced, int):
        return forced
    if profile == "ci":
        return DEFAULT_SEED
    return random.SystemRandom().randrange(2**32)


def _explore(target: Any, profile: str, seed: int | None, modes: tuple[str, ...], overrides: dict[str, Any]) -> tuple[ExploreReport, BaseException | None]:
    chosen = settings(_profile(profile), **overrides)
    adapter = load_adapter(target) if isinstance(target, str) else target
    name = target if isinstance(target, str) else f"{type(target).__module__}:{type(target).__qualname__}"
    seed = _seed(profile, seed)
    machine: type[Histories] = machine_for(adapter, target=name, modes=modes)
    report = ExploreReport(name, profile, seed, replay=replay_command(name, profile, seed))
    machine.replay = report.replay
    hypothesis.seed(seed)(machine)
    error: BaseException | None = None
    started = time.perf_counter()
    failed_baseline = baseline_violations(adapter)
    if failed_baseline:
        report.violations = failed_baseline
        report.failure = f"InvariantViolated: {failed_baseline[0]}"
        return report, InvariantViolated(failed_baseline, "before any history", [], report.replay)
    try:
        with _without_local_constants():
            run_state_machine_as_test(machine, settings=chosen)
    except Exception as exc:  # a violation, or anything the engine raised: both are reported
        error = exc
    report.seconds = time.perf_counter() - started
    report.rules = machine.stats["rules"]
    report.examples = machine.stats["examples"]
    report.raised = machine.stats["raised"]
    if error is not None:
        # Hypothesis attaches the shrunk program to the error, one step per note.
        notes = [line for note in getattr(error, "__notes__", []) for line in str(note).splitlines()]
        report.program = [line for line in notes if line.startswith("state")]
        report.violations = list(getattr(error, "violations", []))
        report.failure = f"{type(error).__name__}: {error}"
    return report, error


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
