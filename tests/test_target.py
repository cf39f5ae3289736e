"""The target is resolved once at the door: followed from run_matrix, it rarely climbs back up.

One real crash-matrix run (the clean family, a sample of two points) is followed with a profile
hook (tests/target_trace.py) in a process of its own and the scenario processes it forks; the
trip the target makes through the harness's modules is counted: calls from a lower layer into a
higher one (the core asking the contract what the adapter offers) and stays in a module the trip
had already left. Before the target was resolved once, the same trip climbed back up 7 times and
returned 33 times (the core asked chaos.adapter for job ids, payloads, probes and server databases).
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

from chaos.adapter import load_adapter
from chaos.core.models import Iteration, Receiver, Recovery
from chaos.core.target import Target, resolve

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CLIMBS_MAX = 3
RETURNS_MAX = 20


def test_followed_from_run_matrix_the_target_climbs_back_up_at_most_3_times_and_returns_at_most_20(tmp_path):
    out = tmp_path / "trace.jsonl"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    env.pop("CRASHGATE_PRISTINE", None)
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "target_trace.py"), str(out)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    trip = json.loads(done.stdout)["trip"]
    assert trip["calls"] > 20, trip  # the run was followed through its phases, not only its door
    assert "chaos.core.kill" in trip["entered"] and "chaos.core.settle" not in trip["sequence"][:1], trip["sequence"]
    assert trip["climbs"] <= CLIMBS_MAX, trip["climbed"]
    assert trip["returns"] <= RETURNS_MAX, trip["sequence"]


def test_the_trip_is_counted_as_described():
    """The counting can fail: a core module asking the contract is a climb, coming back is a return."""
    from target_trace import figures

    events = [[1, 0, "chaos.matrix.runner", "run", ""], [2, 0, "chaos.core.prepare", "prepare", "chaos.matrix.runner"],
              [3, 0, "chaos.adapter", "payload_for", "chaos.core.prepare"], [4, 0, "chaos.core.prepare", "_create", "chaos.core.prepare"]]
    found = figures(events)
    assert (found["stays"], found["climbs"], found["returns"]) == (4, 1, 1)


def test_a_target_holds_each_capability_resolved_or_its_default():
    class Orders(type(load_adapter("chaos:reference_adapter"))):
        recovery = "restart"
        receiver = "strict"

        def job_ids(self, n):
            return [f"order-{1000 + i}" for i in range(1, n + 1)]

    target = resolve(Orders())
    assert isinstance(target, Target) and resolve(target) is target
    assert (target.recovery, target.receiver, target.iteration) == (Recovery.RESTART, Receiver.STRICT, Iteration.ONE_CALL)
    assert target.resolve_jobs("damage:payload:<job 2>") == "damage:payload:order-1002"
    assert target.payload("order-1001") == {"source": "order-1001"}
    assert target.server is None and target.schema is not None and target.probe is not None


def test_a_wrong_word_is_refused_when_the_target_is_resolved():
    class Typo(type(load_adapter("chaos:reference_adapter"))):
        submit_conflict = "last-wins"

    with pytest.raises(ValueError, match="submit_conflict is 'last-wins'; use 'raises' or 'first-wins'"):
        resolve(Typo())


def test_a_history_baseline_names_the_harness_default_payload_when_the_target_offers_none():
    """The histories' baseline reads the resolved target: a target without the adapter's own
    payload (its default) is told so, and how to give one: a target's payload is always a callable
    (the adapter's or the default), so asking whether it has one would credit the adapter with the
    harness's default."""
    import dataclasses

    from chaos.core.target import default_payload
    from chaos.histories.alone import baseline_violations

    reference = resolve(load_adapter("chaos:reference_adapter"))
    never = dataclasses.replace(reference, final_effects=lambda: {"never-reached": ()})  # the job ends, never there
    own = baseline_violations(never)
    default = baseline_violations(dataclasses.replace(never, payload=default_payload))
    assert len(own) == len(default) == 1
    assert "from your adapter's payload(job_id)" in own[0].detail
    assert "the harness's default; if your steps need other input" in default[0].detail


def test_the_capabilities_are_reported_as_the_target_resolved_them():
    """``python -m chaos adapter`` reads the resolved target, not the adapter again: a target whose
    receiver resolved to 'strict' says so, though the adapter object behind it declares nothing."""
    import dataclasses

    from chaos.core.models import Receiver

    reference = resolve(load_adapter("chaos:reference_adapter"))
    strict = dataclasses.replace(reference, receiver=Receiver.STRICT, offered=reference.offered | {"receiver"})
    lines = {s.name: s.line() for s in strict.capabilities()}
    assert lines["receiver"] == "  yes  receiver = 'strict'", lines["receiver"]
    assert lines["iteration"].startswith("  no   iteration: default: 'one-call'"), lines["iteration"]


def test_resolving_says_every_problem_and_the_first_in_its_message():
    class Typos(type(load_adapter("chaos:reference_adapter"))):
        submit_conflict = "last-wins"
        time_source = "sundial"

    from chaos.core.target import UnresolvedTarget

    with pytest.raises(UnresolvedTarget) as raised:
        resolve(Typos())
    assert len(raised.value.problems) == 2, raised.value.problems
    assert str(raised.value).startswith("adapter 'reference': submit_conflict is 'last-wins'; use 'raises' or 'first-wins' (and 1 more")
    assert "time_source is 'sundial'" in raised.value.problems[1]


# Below the door, where a getattr on the adapter itself is still meant: the power fault makes a copy
# of the user's adapter with another synchronous level (an attribute of the adapter, no capability)
# and resolves the copy.
RAW_READS_ALLOWED = {("chaos/hostfaults/power_faults.py", "synchronous")}
BELOW_THE_DOOR = ("chaos/core", "chaos/histories", "chaos/hostfaults", "chaos/plans", "chaos/matrix")
RESOLVING = ("chaos/core/target.py", "chaos/core/declared.py")  # the door itself, reading the adapter once


def _raw_reads(path: pathlib.Path, relative: str) -> list[str]:
    """Each ``getattr``/``hasattr`` of an optional capability on an adapter in ``path``: on a
    name ``adapter`` or an attribute ``.adapter`` (``self.adapter``, ``run.adapter``)."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
            continue
        on = node.args[0]
        named = on.id if isinstance(on, ast.Name) else on.attr if isinstance(on, ast.Attribute) else ""
        if named == "adapter" and (relative, node.args[1].value) not in RAW_READS_ALLOWED:
            found.append(f"{relative}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    return found


def test_below_the_door_no_module_asks_the_adapter_for_a_capability_again():
    """Every optional capability is a field of the resolved target, read there; before, the
    histories, the host's faults and the power runs still asked the adapter (conflict_errors,
    poison_payload, copy_db, schema, release) with a getattr the contract could not show."""
    found = []
    for folder in BELOW_THE_DOOR:
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if relative not in RESOLVING:
                found += _raw_reads(path, relative)
    assert not found, "read these from the resolved target (chaos.core.target.Target) instead:\n" + "\n".join(found)


def test_the_raw_read_rule_catches_a_getattr_on_the_adapter(tmp_path):
    """The check above can fail: a getattr on ``run.adapter`` and on ``adapter`` are both found."""
    module = tmp_path / "phase.py"
    module.write_text("def f(run, adapter):\n    return getattr(run.adapter, 'schema', None), hasattr(adapter, 'release')\n")
    assert [line.split(": ", 1)[1] for line in _raw_reads(module, "phase.py")] == ["getattr(..., 'schema')", "hasattr(..., 'release')"]
