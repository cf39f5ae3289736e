"""The plugin's fixtures: ``chaos_world`` (a fresh engine and world), ``crash_matrix`` (the crash
matrix run with the plugin's settings, failing the test explained on a new finding) and
``chaos_state_machine`` (random histories explored with ``chaos.machine``).

Each fixture's keyword arguments default to the test's ``crash_matrix`` marker's, then to the
settings; each imports the harness only when a test requests it.
"""

from __future__ import annotations

import shlex
import shutil
import warnings
from typing import Any, Callable, Iterator

import pytest

from chaos.plugin.options import ALL_FAILURES_FLAG, MARKER, REFERENCE_TARGET
from chaos.plugin.records import RECORD_KEY, all_known, junit_properties
from chaos.plugin.state import PluginState, plugin_state

__all__ = ["DETAIL_MAX", "chaos_state_machine", "chaos_world", "crash_matrix", "matrix_failure"]

DETAIL_MAX = 4000  # characters of what was seen that a crash_matrix test's failure shows (a path can be long)


def _marker_defaults(request: pytest.FixtureRequest) -> dict[str, Any]:
    marker = request.node.get_closest_marker(MARKER)
    return dict(marker.kwargs) if marker is not None else {}


@pytest.fixture
def chaos_world(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    """A fresh engine database and world (a :class:`chaos.Sandbox`) for the configured target.

    >>> def test_a_job_is_delivered(chaos_world):       # doctest: +SKIP
    ...     chaos_world.submit("doc-1")
    ...     chaos_world.drain()
    ...     assert chaos_world.states() == {"doc-1": "delivered"}
    ...     assert chaos_world.check() == []
    """
    from chaos.core.sandbox import Sandbox

    state = plugin_state(request.config)
    marked = _marker_defaults(request).get("target")
    box = Sandbox(_fixture_adapter(state, marked or state.settings.target, marked), str(tmp_path / "crashgate"), seed=state.settings.seed)
    yield box
    box.close()


def _fixture_adapter(state: PluginState, target: str, marked: str | None) -> Any:
    """The adapter a fixture runs, loaded once per process. A target that does not load is the
    run's setting (or a marker's), not the test's: the run stops there with exit code 2 and one
    line naming the target, where it came from and why, as a fault plan's collection does."""
    try:
        return state.adapter(target)
    except ValueError as exc:
        source = "the test's crash_matrix marker or call" if marked else state.settings.sources.get("target", "the settings")
        pytest.exit(f"crashgate target {target!r} (from {source}): {exc}", returncode=2)


@pytest.fixture
def crash_matrix(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Run the crash matrix with the plugin's settings; fail the test, explained, on a violation.

    Keyword arguments (each defaults to the ``crash_matrix`` marker's, then to the settings):
    ``target``, ``families``, ``scenarios``, ``mode``, ``seed``, ``points``, ``deep``, ``faults``
    (passed to :func:`chaos.run_matrix`, e.g. ``["crash", "pause"]``; the ``--chaos-faults``
    setting otherwise), ``pairs`` (interleavings, a seeded sample; ``--chaos-pairs``), ``check``
    (default True: fail on any violation; False: just return the :class:`chaos.MatrixReport`).

    >>> @pytest.mark.crash_matrix(families=["clean", "sender"])   # doctest: +SKIP
    ... def test_my_engine_survives_a_crash_anywhere(crash_matrix):
    ...     report = crash_matrix()
    ...     assert report.points > 0
    """
    state = plugin_state(request.config)
    defaults = _marker_defaults(request)

    def run(**kwargs: Any) -> Any:
        from chaos.matrix.runner import MatrixUsageError, run_matrix

        options = {**defaults, **kwargs}
        unknown = set(options) - {"target", "families", "scenarios", "mode", "seed", "points", "deep", "faults", "pairs", "check"}
        if unknown:
            raise TypeError(f"crash_matrix() got unknown arguments {sorted(unknown)}; see the fixture's docstring")
        s = state.settings
        target = options.get("target") or s.target
        mode = options.get("mode") or s.mode
        seed = s.seed if options.get("seed") is None else int(options["seed"])
        points = str(options.get("points") or s.points)
        sample = int(points) if points.isdigit() else None
        point = points if "::" in points else None
        faults = options.get("faults") or s.faults
        faults = tuple(k.strip() for k in faults.split(",")) if isinstance(faults, str) else tuple(faults)
        if point is not None and "@" in point:  # one item's name, as a plan prints it: POINT@pause-live
            point, _, kind = point.partition("@")
            faults = ("pause",) if kind.startswith("pause") else (kind,)
        pairs = s.pairs if options.get("pairs") is None else int(options["pairs"])
        _fixture_adapter(state, target, options.get("target"))  # a target that does not load stops the run
        workdir = state.scratch("matrix")
        try:
            report = run_matrix(
                target,
                mode=mode,
                seed=seed,
                deep=options.get("deep", True),
                families=options.get("families"),
                scenarios=options.get("scenarios"),
                point=point,
                sample=sample,
                workdir=workdir,
                faults=faults,
                pairs=pairs,
                allowed_effects=s.allowed_effects,
                scenario_timeout_s=s.scenario_timeout_s,
            )
        except MatrixUsageError as exc:  # an argument run_matrix refuses (a family, a point, a fault kind): this test's
            pytest.fail(f"crash_matrix(): {exc}", pytrace=False)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        # The settings a replay of this test needs besides its id: those the test itself does not set.
        settings: list[str] = []
        if not options.get("target") and s.target != REFERENCE_TARGET:
            settings += ["--chaos-target", s.target]
        if s.allowed_effects:
            settings += ["--chaos-allow-effects", ",".join(s.allowed_effects)]
        if s.scenario_timeout_s is not None:
            settings += ["--chaos-scenario-timeout", f"{s.scenario_timeout_s:g}"]
        records = _matrix_records(request.node.nodeid, report, settings)
        for rec in records:
            request.node.user_properties.append((RECORD_KEY, rec))
        request.node.user_properties.extend(junit_properties(records))
        bad = [rec for rec in records if not rec["held"] and not all_known(rec, s.known)]
        if s.known_file:
            from chaos.core.findings import known_keys

            gone = sorted(set(s.known) - known_keys(report))
            if gone:  # a known finding fixed: the file can lose it
                request.node.user_properties.append(("crashgate_known_gone", [list(k) for k in gone]))
                from chaos.core.findings import plural

                warnings.warn(f"{plural(len(gone), 'known finding')} of {s.known_file} no longer seen, e.g. "
                              f"{gone[0][2]} in family {gone[0][0]!r}: {gone[0][3]}", stacklevel=2)
        if bad and options.get("check", True):
            from chaos.core.findings import plural

            bad_points = sum(1 for rec in bad if rec["kind"] == "point")
            bad_bases = len(bad) - bad_points
            what = "crash points" if faults == ("crash",) else f"points ({', '.join(faults)})"
            head = f"{bad_points} of {report.points} {what} violated an invariant"
            if bad_bases:
                head += f", and {bad_bases} of {plural(len(report.baselines), 'family', 'families')} already without a crash"
            pytest.fail(matrix_failure(head, bad, all_failures=s.all_failures), pytrace=False)
        return report

    return run


def matrix_failure(head: str, bad: list[dict[str, Any]], *, all_failures: bool = False) -> str:
    """A failing crash_matrix test's text: its findings first, each once (what was seen, at how
    many points, the user's line, the fix for its cause, one replay command, why the invariant
    matters), then every violated point with ``all_failures``."""
    from chaos.core.findings import plural, record_findings
    from chaos.plans.runner import why
    from chaos.report.html import FINDINGS_SHOWN_MAX

    groups = record_findings(bad)
    out = [f"{head}: {plural(len(groups), 'finding')}" + ("" if all_failures else f" ({ALL_FAILURES_FLAG} lists every point)")]
    for group in groups[:FINDINGS_SHOWN_MAX]:
        out += group.lines("", detail_max=DETAIL_MAX)  # a test's failure text says what was seen in full
        reason = why(group.invariant)
        if reason:
            out.append(f"  why it matters: {reason}")
    if len(groups) > FINDINGS_SHOWN_MAX:
        out.append(f"... and {plural(len(groups) - FINDINGS_SHOWN_MAX, 'finding')} more (the crashgate summary below lists them)")
    if all_failures:
        out.append("every violated point:")
        for rec in bad:
            what = [f"{inv}: {detail}" for inv, detail in rec["violations"]] + list(rec["failures"])
            out.append(f"  {rec.get('pytest_id', rec['nodeid'])}: {what[0] if what else 'failed'}")
    return "\n".join(out)


def _matrix_records(nodeid: str, report: Any, settings: list[str] | tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """A crash_matrix test's records, one per family's baseline and per point; each replay is the
    pytest command that runs that one item again, with the ``settings`` it needs (the target a
    command line gave, say)."""
    out: list[dict[str, Any]] = []
    first = True
    tail = "".join(" " + shlex.quote(p) for p in settings)
    for name, base in report.baselines.items():
        out.append({
            "nodeid": f"{nodeid}::{name}::baseline", "plan": nodeid, "family": name, "lesson": report.lessons.get(name, ""),
            "target": report.target, "mode": report.mode, "seed": report.seed, "kind": "baseline", "matrix": True, "group": name,
            "held": base.held, "violations": [[v.invariant, v.detail] for v in base.violations], "failures": [],
            "wasted": base.wasted_calls, "seconds": round(base.seconds, 5),
            "replay": " ".join(shlex.quote(p) for p in ["python", "-m", "pytest", nodeid]) + tail,
            "pytest_id": nodeid + tail,  # a family without any fault is replayed by the test itself
        })
    for r in report.results:
        suffix = "" if r.fault == "crash" else f"@{r.fault}"
        rec = {
            "nodeid": f"{nodeid}::{r.id}{suffix}", "plan": nodeid, "family": r.family, "lesson": report.lessons.get(r.family, ""),
            "target": report.target, "mode": report.mode, "seed": report.seed, "kind": "point", "matrix": True,
            "group": r.family, "point": r.point.id, "file": r.point.file, "line": r.point.line, "hit": r.point.hit,
            "function": r.point.function, "source": r.source, "exit": r.outcome.exit, "fault": r.fault,
            "held": r.outcome.held, "violations": [[v.invariant, v.detail] for v in r.outcome.violations],
            "failures": [], "wasted": r.outcome.wasted_calls, "zombie": r.outcome.zombie_calls,
            "blocked_s": round(r.outcome.blocked_s, 4), "seconds": round(r.outcome.seconds, 5),
            # What pytest accepts: the test's own id, narrowed to this one point by --chaos-points.
            "replay": " ".join(shlex.quote(p) for p in ["python", "-m", "pytest", nodeid, "--chaos-points", f"{r.id}{suffix}",
                                                        "--chaos-mode", report.mode, "--chaos-seed", str(report.seed)]) + tail,
            "pytest_id": f"{nodeid} --chaos-points {shlex.quote(r.id + suffix)}" + tail,
            "replay_cli": r.replay,  # the same point outside pytest
        }
        if r.second is not None:
            rec.update(second=r.second.id, second_file=r.second.file, second_line=r.second.line, pairs_possible=report.pairs_possible)
        if report.sampled_from:  # a sample: the report says of how many points
            rec["points_possible"] = report.sampled_from
        if first:
            rec["executable"] = {f: sorted(lines) for f, lines in report.executable.items()}
            first = False
        out.append(rec)
    return out


@pytest.fixture
def chaos_state_machine(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """Explore random histories of the configured target with ``chaos.machine``'s state machine.

    Call it with ``state_machine_test``'s arguments (``target``, ``profile``, Hypothesis settings);
    it runs the exploration and fails the test with the shrunk program and its replay command.
    Skips, with the reason, where this crashgate has no state-machine explorer.

    >>> def test_random_histories_hold(chaos_state_machine):     # doctest: +SKIP
    ...     chaos_state_machine(profile="ci", max_examples=20)
    """
    try:
        from chaos.machine import state_machine_test
    except ImportError as exc:
        pytest.skip(f"the crashgate state-machine explorer (chaos.machine.state_machine_test) is not available: {exc}")
    state = plugin_state(request.config)
    defaults = _marker_defaults(request)

    def explore(target: str | None = None, **kwargs: Any) -> None:
        case = state_machine_test(target or defaults.get("target") or state.settings.target, **kwargs)
        case().runTest()

    return explore
